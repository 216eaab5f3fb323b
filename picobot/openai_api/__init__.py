"""The OpenAI-compatible API as one more channel (`openai_api`): parse requests, run them through
the gateway's intake, wait for each input's own answer, shape it as OpenAI objects.

No web framework here: web/openai_api.py is the thin HTTP edge. docs/API.md describes the wire.
"""

CHANNEL = "openai_api"
