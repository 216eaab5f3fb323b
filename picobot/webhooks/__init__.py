"""Inbound webhooks: `POST /hooks/<name>` with a signed JSON body becomes an agent run.

    accept.accept(ports, name, headers, body)   verify, parse, render, store, enqueue -> run id
    plugin.WebhooksPlugin                       the run settles in its turn's commit; callbacks
    callback.send(ports, run_id)                the signed result POST, retried with backoff

Pieces without I/O: signature.py (HMAC both ways), body.py (hostile JSON), template.py (prompts).
"""
