"""``agentctl api-key create NAME | list | revoke KEY``: the bearer keys of the
OpenAI-compatible endpoint.

``create`` prints the key alone on stdout (``KEY=$(agentctl api-key create editor)``
works) and what to do with it on stderr: the key is shown this once, as the daemon keeps
only its hash.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentd.client.connection import Connection
from agentd.client.render import print_json
from agentd.client.times import shown


def cmd_api_key(conn: Connection, args: argparse.Namespace) -> int:
    if args.action == "create":
        created = conn.result("apikey.create", {"name": args.key})
        if args.json:
            print_json(created)
            return 0
        print(created["key"])
        print(_created_note(created), file=sys.stderr)
    elif args.action == "revoke":
        revoked = conn.result("apikey.revoke", {"key": args.key})
        print(f"revoked API key {revoked['name']} ({revoked['id']}); it opens nothing any more")
    else:
        keys = conn.result("apikey.list")["keys"]
        if args.json:
            print_json(keys)
        elif not keys:
            print("no API key: make one with `agentctl api-key create NAME`", file=sys.stderr)
        for key in [] if args.json else keys:
            state = f"revoked {shown(key['revoked_at'])}" if key["revoked_at"] else "in use"
            print(
                f"{key['name']}  {key['id']}  {key['shown']}…  "
                f"created {shown(key['created_at'])}  {state}"
            )
    return 0


def _created_note(created: dict[str, Any]) -> str:
    where = (
        f"the endpoint is {created['endpoint']}"
        if created["endpoint"]
        else "the endpoint is off until the web view is on (agentd up --web, or AGENTD_WEB)"
    )
    return (
        f"API key {created['name']} ({created['id']}): it is shown only now, so keep it; "
        f"send it as `Authorization: Bearer KEY`; {where}"
    )
