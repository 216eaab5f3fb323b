"""The demo LLM's Anthropic request check answers a malformed tool block with the API's message, not a crash."""

from picobot.demo.llm.wire_anthropic import validate


def _body(*messages):
    return {"max_tokens": 16, "messages": [{"role": "user", "content": "hi"}, *messages]}


def test_tool_use_without_id_is_a_field_error_not_a_type_error():
    # two pending ids, one of them missing: sorting them for the message used to raise TypeError
    assistant = {"role": "assistant", "content": [{"type": "tool_use", "name": "x", "input": {}},
                                                  {"type": "tool_use", "id": "b", "name": "x", "input": {}}]}
    user = {"role": "user", "content": [{"type": "text", "text": "no results"}]}
    assert validate(_body(assistant, user)) == "messages.1.content.0.tool_use.id: Field required"


def test_tool_result_without_tool_use_id_is_a_field_error():
    assistant = {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x", "input": {}}]}
    user = {"role": "user", "content": [{"type": "tool_result", "content": "42"},
                                        {"type": "tool_result", "tool_use_id": "a", "content": "42"}]}
    assert validate(_body(assistant, user)) == "messages.2.content.0.tool_result.tool_use_id: Field required"


def test_unanswered_ids_are_still_listed_sorted():
    assistant = {"role": "assistant", "content": [{"type": "tool_use", "id": "b", "name": "x", "input": {}},
                                                  {"type": "tool_use", "id": "a", "name": "x", "input": {}}]}
    user = {"role": "user", "content": [{"type": "text", "text": "none"}]}
    assert validate(_body(assistant, user)).endswith("immediately after: a, b")
