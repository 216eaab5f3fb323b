"""A fake Feishu (Lark) for tests and demos: the OpenAPI server and a signed/encrypted event sender.

    from scripts.fake_feishu import FakeFeishu, EventSender
    fake = FakeFeishu(app_id="cli_test", app_secret="secret_test").start()
    sender = EventSender("http://127.0.0.1:PORT/feishu/events", verification_token="vtok", encrypt_key="ekey", fake=fake)
    sender.post(sender.message(chat_id="oc_1", text="hi"), duplicates=4)

Demo next to `picobot up`: `python -m scripts.fake_feishu --port 9300 --webhook http://127.0.0.1:19876/feishu/events`.
"""

from scripts.fake_feishu.events import EventSender, encrypt, sign
from scripts.fake_feishu.server import FakeFeishu

__all__ = ["EventSender", "FakeFeishu", "encrypt", "sign"]
