"""WeChat CDN media: AES-128-ECB with PKCS7, keys as iLink writes them, download and upload.

`aes_key` is base64 of 16 raw bytes or of a 32-char hex string; `image_item.aeskey` (raw hex) wins.
Download: `full_url`, else `GET {cdn}/download?encrypted_query_param=…`. Upload: getuploadurl, then
POST the ciphertext to `upload_full_url`; the CDN answers the media's `x-encrypted-param`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from typing import Any

import httpx
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


class MediaError(Exception):
    """A media item can not be fetched or read (its key, its URL, its size)."""


def encrypt(data: bytes, key: bytes) -> bytes:
    padder = padding.PKCS7(128).padder()
    enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    return enc.update(padder.update(data) + padder.finalize()) + enc.finalize()


def decrypt(data: bytes, key: bytes) -> bytes:
    if len(data) % 16:
        raise MediaError("the ciphertext is not a whole number of AES blocks")
    dec = Cipher(algorithms.AES(key), modes.ECB()).decryptor()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        return unpadder.update(dec.update(data) + dec.finalize()) + unpadder.finalize()
    except ValueError:
        raise MediaError("the media did not decrypt (wrong key?)") from None


def parse_key(aes_key: Any = None, hex_key: Any = None) -> bytes:
    """The 16-byte key from `aeskey` (hex) or `aes_key` (base64 of raw bytes or of hex)."""
    try:
        if isinstance(hex_key, str) and len(hex_key) == 32:
            return binascii.unhexlify(hex_key)
        raw = base64.b64decode(aes_key or "", validate=True) if isinstance(aes_key, str) else b""
        if len(raw) == 16:
            return raw
        if len(raw) == 32:
            return binascii.unhexlify(raw.decode("ascii"))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        pass
    raise MediaError("the media has no usable AES key")


def download(media: Any, cdn_base_url: str, max_bytes: int, hex_key: Any = None) -> bytes:
    """Fetch and decrypt one `media` object ({encrypt_query_param, aes_key, full_url})."""
    if not isinstance(media, dict):
        raise MediaError("no media reference")
    key = parse_key(media.get("aes_key"), hex_key)
    url = media.get("full_url")
    params = None
    if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        param = media.get("encrypt_query_param")
        if not isinstance(param, str) or not param:
            raise MediaError("the media has no URL")
        url, params = f"{cdn_base_url.rstrip('/')}/download", {"encrypted_query_param": param}
    try:
        with httpx.stream("GET", url, params=params, timeout=30.0) as response:
            if response.status_code != 200:
                raise MediaError(f"the CDN answered HTTP {response.status_code}")
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > max_bytes + 16:
                    raise MediaError(f"larger than {max_bytes} bytes")
    except httpx.HTTPError as exc:
        raise MediaError(f"the CDN can not be reached ({type(exc).__name__})") from None
    return decrypt(bytes(body), key)


def upload(api: Any, data: bytes, to_user: str, media_type: int) -> dict[str, Any]:
    """Encrypt and upload `data`; the `media` object a sendmessage item refers to."""
    key = os.urandom(16)
    hex_key = key.hex()
    body = {"filekey": os.urandom(16).hex(), "media_type": media_type, "to_user_id": to_user, "rawsize": len(data),
            "rawfilemd5": hashlib.md5(data).hexdigest(), "filesize": (len(data) // 16 + 1) * 16,
            "no_need_thumb": True, "aeskey": hex_key}
    target = api.upload_url(body).get("upload_full_url")
    if not isinstance(target, str) or not target.startswith(("http://", "https://")):
        raise MediaError("getuploadurl gave no upload URL")
    try:
        response = httpx.post(target, content=encrypt(data, key), headers={"Content-Type": "application/octet-stream"},
                              timeout=60.0)
    except httpx.HTTPError as exc:
        raise MediaError(f"the CDN can not be reached ({type(exc).__name__})") from None
    param = response.headers.get("x-encrypted-param")
    if response.status_code != 200 or not param:
        raise MediaError(f"the upload failed (HTTP {response.status_code})")
    return {"encrypt_query_param": param, "aes_key": base64.b64encode(hex_key.encode()).decode(), "encrypt_type": 1}
