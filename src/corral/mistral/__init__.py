"""Agent tools backed by Mistral's API, and a chat host that uses them.

``mistral_code_interpreter`` and ``web_search`` are stateless one-shot Conversations calls;
connector tools are loaded on demand by the loader tools; ``run_chat`` is the agent loop of
``corral chat``. Above: the front ends (CLI, MCP), which build the settings, the client and
a registry per session. Below: corral.tools (registry and results) and httpx. Knows nothing
of the engine: corral's own ``code_interpreter`` reaches the chat loop only as a registered
tool.
"""

from corral._public import publish as _publish
from corral.mistral._chat import DEFAULT_CHAT_MODEL, ChatSession, run_chat
from corral.mistral._client import MistralClient, conversation_body, instructions_for
from corral.mistral._connectors import Connector
from corral.mistral._filters import CHAT_SERVER_TOOLS, filter_chat_completions_tools
from corral.mistral._interpreter import mistral_code_interpreter_tool, parse_code_interpreter
from corral.mistral._loader import ConnectorLoader
from corral.mistral._register import register_mistral_tools
from corral.mistral._search import parse_web_search, web_search_tool
from corral.mistral._settings import DEFAULT_BASE_URL, DEFAULT_SEARCH_MODEL, MistralSettings

__all__ = [
    "CHAT_SERVER_TOOLS",
    "DEFAULT_BASE_URL",
    "DEFAULT_CHAT_MODEL",
    "DEFAULT_SEARCH_MODEL",
    "ChatSession",
    "Connector",
    "ConnectorLoader",
    "MistralClient",
    "MistralSettings",
    "conversation_body",
    "filter_chat_completions_tools",
    "instructions_for",
    "mistral_code_interpreter_tool",
    "parse_code_interpreter",
    "parse_web_search",
    "register_mistral_tools",
    "run_chat",
    "web_search_tool",
]

_publish(globals())
