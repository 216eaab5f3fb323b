"""The Feishu (Lark) channel.

config.py FeishuConfig (channels.feishu) · crypto.py decrypt and signature · webhook.py the
event webhook · inbound.py + richtext.py events to InboundMessages · api.py the OpenAPI client ·
cards.py, adapter.py, live.py delivery · longconn.py the long-connection runner.
Nothing is imported here: lark-oapi and httpx load only where they are used.
"""
