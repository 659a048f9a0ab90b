"""A connector landscape for the loader tests, served by the fake."""

from __future__ import annotations

from .fake_mistral import FakeMistral, Reply, connector_item, error_body, remote_tool

OUTLOOK_TOOLS = [
    remote_tool(
        "search_messages",
        "Search the mailbox.\nSupports KQL syntax.",
        title="Search messages",
        annotations={"readOnlyHint": True, "destructiveHint": False, "openWorldHint": True},
    ),
    remote_tool("send_message", "\n  Send an email from the signed-in account."),
    remote_tool("web_search", "Search the web from Outlook."),
]
NOTION_TOOLS = [remote_tool("search_messages", ""), remote_tool("create_page", "Create a page.")]
UNAUTHENTICATED = error_body("No credentials found", type="authentication_error")


def populate(fake: FakeMistral) -> None:
    fake.page_size = 2  # the listing spans three pages
    fake.connectors = [
        connector_item("o1", "outlook", description="Read, search and send Outlook mail."),
        connector_item("n1", "notion", description="Notion pages.", authenticated=None),
        connector_item("c1", "calendar", authenticated=None, supports_mcp=None),
        connector_item("h1", "crm_http", description="CRM.", supports_mcp=False),
        connector_item("d1", "drive", authenticated=False),
        connector_item("b1", "broken", authenticated=None),
    ]
    fake.tools["o1"] = OUTLOOK_TOOLS
    fake.tools["n1"] = NOTION_TOOLS
    fake.tools["c1"] = Reply(401, UNAUTHENTICATED)
    fake.tools["b1"] = Reply(500, error_body("boom"))
