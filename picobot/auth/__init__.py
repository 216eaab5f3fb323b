"""Credentials: device pairing, API keys and the terminal's token file, on shared token primitives.

    tokens.py      generating, hashing and checking a presented secret; the last-used refresh interval
    pairing.py     one-time pairing codes, device tokens, the failed-attempt limit, the terminal's own token
    apikeys.py     named API keys for the OpenAI-compatible endpoint, scoped to one agent
    token_file.py  where the terminal keeps its token (light: no SQL imported)

Only hashes are stored (picobot/storage/pairing.py, picobot/storage/api_keys.py). This file imports
nothing, so `picobot chat` can read the token file without the storage stack.
"""
