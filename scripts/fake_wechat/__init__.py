"""A fake iLink (WeChat bot API) server with its CDN, for tests and demos (see server.py)."""

from scripts.fake_wechat.server import FakeWeChat

__all__ = ["FakeWeChat"]
