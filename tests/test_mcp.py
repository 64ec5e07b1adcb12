"""`pimem mcp` as a real subprocess, driven by the MCP SDK's own stdio client."""

import sys

import anyio
import pytest

from conftest import snapshot, subprocess_env

mcp = pytest.importorskip("mcp")

SECRET = "sk-test-0000SECRET"


def call_all(home, calls):
    """Start `python -m pimem mcp`, list its tools, make each ``(tool, arguments)`` call, and return the
    tool names and each result as a dict (isError, structuredContent, content)."""

    async def session():
        params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "pimem", "mcp"], env=subprocess_env(PIMEM_HOME=home))
        async with mcp.stdio_client(params) as (read, write):
            async with mcp.ClientSession(read, write) as client:
                await client.initialize()
                tools = [t.name for t in (await client.list_tools()).tools]
                results = []
                for name, args in calls:
                    result = await client.call_tool(name, args)
                    results.append(result.model_dump(by_alias=True, mode="json"))
                return tools, results

    return anyio.run(session)


@pytest.fixture
def talk(run):
    run("append", "main", "the staging db listens on 5433")
    run("append", "main", "-k", "tool", f"cat .env  # {SECRET}")
    run("append", "main", "-k", "echo", f"OPENAI_API_KEY={SECRET}")
    run("append", "main", "-k", "pi", "好的，端口是 5433。")


def test_tools_are_listed_and_no_read_call_writes(home, talk):
    before = snapshot(home)
    tools, results = call_all(home, [
        ("list_memories", {}),
        ("since", {"name": "main"}),
        ("since", {"name": "main", "start": 1, "limit": 1, "include_tools": True}),
        ("message", {"name": "main", "i": 3}),
        ("message", {"name": "main", "i": 0, "offset": 4, "max_chars": 7}),
        ("message", {"name": "nope", "i": 0}),
    ])
    assert snapshot(home) == before
    assert {"list_memories", "since", "message"} <= set(tools)
    listing, plain, tooled, reply, window, missing = results
    assert [m["name"] for m in listing["structuredContent"]["memories"]] == ["main"]
    assert [m["i"] for m in plain["structuredContent"]["messages"]] == [0, 3]
    assert plain["structuredContent"]["next"] is None
    assert all("held" in m for m in plain["structuredContent"]["messages"])
    assert [m["kind"] for m in tooled["structuredContent"]["messages"]] == ["tool"]
    assert tooled["structuredContent"]["next"] == 2
    assert reply["structuredContent"]["text"] == "好的，端口是 5433。"
    assert window["structuredContent"]["text"] == "staging" and window["structuredContent"]["next_offset"] == 11
    assert missing["isError"] and "no memory named 'nope'" in missing["content"][0]["text"]


def test_tool_traffic_only_with_include_tools(home, talk):
    _, results = call_all(home, [
        ("since", {"name": "main"}),
        ("message", {"name": "main", "i": 2}),
        ("message", {"name": "main", "i": 2, "include_tools": True}),
    ])
    plain, refused, shown = results
    assert SECRET not in str(plain) and SECRET not in str(refused)
    assert refused["isError"] and "include_tools" in refused["content"][0]["text"]
    assert shown["structuredContent"]["text"] == f"OPENAI_API_KEY={SECRET}"
