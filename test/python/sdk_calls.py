"""What a Python user does with the official `openai` and `anthropic` packages against quotaring.

Run by test/e2e/python-sdk.test.ts in the venv of scripts/ensure-python-sdks.sh:

    python sdk_calls.py <check> [count]

with QR_BASE_URL (the router, no /v1) and QR_KEY (a tenant key) in the environment. Each check
prints one JSON object on stdout (what the test asserts on); an SDK error is raised (a traceback
on stderr, exit 1), so an HTTP error the SDK turns into an exception fails the test with its body.
"""
import json
import os
import sys

import anthropic
import openai

BASE = os.environ["QR_BASE_URL"]
KEY = os.environ["QR_KEY"]


def oai() -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0)


def responses() -> dict:
    """A background response cancelled, its input items listed, deleted, then gone (404)."""
    client = oai()
    slow = {"x-sim-background-ms": "60000"}
    created = client.responses.create(model="gpt-4o-mini", input="hi", background=True, max_output_tokens=64, extra_headers=slow)
    cancelled = client.responses.cancel(created.id)
    items = client.responses.input_items.list(created.id)
    listed = client.responses.create(model="gpt-4o-mini", input=[{"role": "user", "content": "one"}, {"role": "user", "content": "two"}], max_output_tokens=16)
    asc = client.responses.input_items.list(listed.id, order="asc")
    deleted = client.responses.delete(created.id)
    try:
        client.responses.retrieve(created.id)
        gone = None
    except openai.NotFoundError as err:
        gone = err.status_code
    return {
        "created": created.status,
        "cancelled": cancelled.status,
        "items": [[i.type, i.role, i.content[0].text] for i in items.data],
        "asc": [i.content[0].text for i in asc.data],
        "deleted": deleted,
        "after_delete": gone,
    }


def moderations() -> dict:
    """One input, then two (the second flagged by the simulator's `[flag]`)."""
    client = oai()
    one = client.moderations.create(input="hello")
    two = client.moderations.create(model="omni-moderation-latest", input=["fine", "[flag] not fine"])
    return {
        "one": [r.flagged for r in one.results],
        "two": [r.flagged for r in two.results],
        "harassment": two.results[1].categories.harassment,
        "model": two.model,
    }


def chat_streams(count: int) -> dict:
    """`count` chat streams read to the end: the SDK stops at `data: [DONE]` and closes the connection."""
    client = oai()
    ends = 0
    for _ in range(count):
        stream = client.chat.completions.create(model="gpt-4o-mini", max_tokens=5, stream=True, messages=[{"role": "user", "content": "hi"}])
        last = None
        for chunk in stream:
            last = chunk
        ends += 1 if last is not None and last.choices and last.choices[0].finish_reason is not None else 0
    return {"streams": count, "finished": ends}


def anthropic_streams(count: int) -> dict:
    """`count` Messages streams read to `message_stop` with the anthropic SDK."""
    client = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0)
    stops = 0
    for _ in range(count):
        with client.messages.stream(model="claude-test", max_tokens=5, messages=[{"role": "user", "content": "hi"}]) as stream:
            for _text in stream.text_stream:
                pass
            stops += 1 if stream.get_final_message().stop_reason is not None else 0
    return {"streams": count, "finished": stops}


CHECKS = {"responses": responses, "moderations": moderations, "chat_streams": chat_streams, "anthropic_streams": anthropic_streams}

if __name__ == "__main__":
    check = CHECKS[sys.argv[1]]
    result = check(int(sys.argv[2])) if len(sys.argv) > 2 else check()
    print(json.dumps(result))
