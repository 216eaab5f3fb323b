"""The WeChat channel: Tencent's iLink bot API (QR login, getupdates long poll, sendmessage)."""
