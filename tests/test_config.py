"""corral._config: one Config from corral.toml, the environment and flags."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from corral._config import ApiKey, Config, table_values
from corral._limits import DEFAULT_LIMITS
from corral.errors import ConfigError
from corral.tools import DEFAULT_CODE_INTERPRETER_CONFIG

TOML = """
[server]
host = "0.0.0.0"
port = 9000
data_dir = "/srv/corral"
max_sessions_per_key = 4

[server.access]
create_code_app_roles = ["coder"]

[[server.api_keys]]
key = "k1"
user = "alice"
roles = ["coder", "admin"]

[[server.api_keys]]
key = "app"
user = "quickapps"
per_request = true

[engine]
capacity = 3
timeout = 12.5

[container]
session_id = "dep-1"

[code_interpreter]
maxCalls = 3

[mistral.connectorTools]
autoLoad = ["drive"]
"""


@pytest.fixture
def toml_file(tmp_path: Path) -> Path:
    path = tmp_path / "corral.toml"
    path.write_text(TOML)
    return path


def test_defaults_without_file_or_environment(tmp_path: Path) -> None:
    config = Config.load(environ={"HOME": str(tmp_path)})
    assert config.mode == "gateway"
    assert (config.bind_host, config.bind_port) == ("127.0.0.1", 8000)
    assert config.data_dir == tmp_path / ".local/share/corral"
    assert config.api_keys == ()
    assert config.create_code_app_roles is None
    assert config.upload_max_size == 536870912
    assert config.execution_timeout == 30.0  # the one default: Limits.timeout
    assert config.session_idle_timeout == 600.0
    assert config.session_id is None
    assert config.raw_toml == {}
    assert config.limits() == config.limits().replace(timeout=30.0)


def test_container_mode_defaults_to_dial_address() -> None:
    config = Config.load(flags={"mode": "container"}, environ={})
    assert (config.bind_host, config.bind_port) == ("0.0.0.0", 8080)
    assert config.mount_folder == Path("/mnt/data")


def test_file_is_read_and_raw_tables_kept(toml_file: Path) -> None:
    config = Config.load(flags={"config": str(toml_file)}, environ={})
    assert config.host == "0.0.0.0"
    assert config.port == 9000
    assert config.data_dir == Path("/srv/corral")
    assert config.max_sessions_per_key == 4
    assert config.create_code_app_roles == ("coder",)
    assert config.api_keys == (
        ApiKey(key="k1", user="alice", roles=("coder", "admin")),
        ApiKey(key="app", user="quickapps", per_request=True),
    )
    assert config.capacity == 3
    assert config.limits().timeout == 12.5
    assert config.session_id == "dep-1"
    # Other packages' tables are checked here and reach them snake_case.
    assert config.raw_toml["code_interpreter"] == {"max_calls": 3}
    assert config.raw_toml["mistral"] == {"connector_tools": {"auto_load": ["drive"]}}
    assert "k1" not in repr(config.api_keys[0])


def test_flag_beats_env_beats_file(toml_file: Path) -> None:
    env = {"CORRAL_CONFIG": str(toml_file), "CORRAL_PORT": "9100", "CORRAL_TIMEOUT": "3"}
    config = Config.load(environ=env)
    assert (config.port, config.timeout, config.host) == (9100, 3.0, "0.0.0.0")
    config = Config.load(flags={"port": 9200, "host": None}, environ=env)
    assert (config.port, config.host) == (9200, "0.0.0.0")


def test_environment_forms() -> None:
    env = {
        "CORRAL_API_KEYS": "k1:alice:coder|admin, k2:bob,",
        "CORRAL_CREATE_CODE_APP_ROLES": "",
        "CORRAL_CAPACITY": "auto",
        "UPLOAD_MAX_SIZE": "1_000",
        "SESSION_ID": "abc",
        "MOUNT_FOLDER": "rel/folder",
        "LOG_LEVEL": "debug",
    }
    config = Config.load(environ=env)
    assert config.api_keys == (
        ApiKey(key="k1", user="alice", roles=("coder", "admin")),
        ApiKey(key="k2", user="bob"),
    )
    assert config.create_code_app_roles == ()
    assert config.capacity is None
    assert config.upload_max_size == 1000
    assert config.session_id == "abc"
    assert config.mount_folder == Path.cwd() / "rel/folder"
    assert config.log_level == "debug"


@pytest.mark.parametrize(
    ("env", "text"),
    [
        ({"CORRAL_PORTT": "1"}, "CORRAL_PORTT"),
        ({"CORRAL_PORT": "eighty"}, "CORRAL_PORT"),
        ({"CORRAL_PORT": "70000"}, "port"),
        ({"CORRAL_MODE": "both"}, "mode"),
        ({"CORRAL_TIMEOUT": "0"}, "timeout"),
        ({"CORRAL_TIMEOUT": "inf"}, "timeout"),
        ({"CORRAL_API_KEYS": "lonely"}, "key:user"),
        ({"CORRAL_API_KEYS": "a:x,a:y"}, "twice"),
        ({"CORRAL_CONFIG": "/nonexistent/corral.toml"}, "cannot read"),
    ],
)
def test_bad_environment_is_a_config_error(env: dict[str, str], text: str) -> None:
    with pytest.raises(ConfigError, match=text):
        Config.load(environ=env)


@pytest.mark.parametrize(
    ("toml", "text"),
    [
        ("[server]\nprot = 1\n", "prot"),
        ("[server]\nport = '80'\n", "server.port"),
        ("[server]\nport = true\n", "server.port"),
        ("[engine]\ntimeout = 'soon'\n", "engine.timeout"),
        ("server = 3\n", r"\[server\]"),
        ("[[server.api_keys]]\nkey = 'k'\n", "string"),
        ("[[server.api_keys]]\nkey = 'k'\nuser = 'u'\nrole = ['x']\n", "takes key"),
        ("[server.access]\ncreate_code_app_roles = 'admin'\n", "create_code_app_roles"),
        ("not toml [", "corral.toml"),
        ("bogus = 1\n", "'bogus' at the top level"),
        ("[bogus]\nx = 1\n", "'bogus' at the top level"),
        ("[engine]\nbogus = 1\n", r"'bogus' in \[engine\]"),
        ("[code_interpreter]\nmaxCalls = 1\nmax_calls = 2\n", "given twice"),
        ("[code_interpreter]\nmax_calls = 0\n", "code_interpreter.max_calls"),
        ("[code_interpreter]\nmaxcalls = 1\n", "maxcalls"),
        ("[mcp]\nmax_calls_per_session = 'many'\n", "mcp.max_calls_per_session"),
        ("[mistral]\nknowledge = 1\n", r"\[mistral.knowledge\] must be a table"),
        ("[mistral.connector_tools]\nenabled = 'yes'\n", "enabled"),
        ("[mistral.knowledge]\nsearch = 'm'\n", "search"),
    ],
)
def test_bad_file_is_a_config_error(tmp_path: Path, toml: str, text: str) -> None:
    path = tmp_path / "corral.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=text):
        Config.load(flags={"config": path}, environ={})


def test_unknown_flag_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="verbose"):
        Config.load(flags={"verbose": True}, environ={})


def test_every_field_has_a_row_in_the_one_table() -> None:
    from corral import _config

    for field in dataclasses.fields(Config):
        if field.name != "raw_toml":
            assert field.name in _config._FIELDS
            assert _config._FIELDS[field.name].held
    for name, spec in _config._FIELDS.items():
        assert spec.doc.endswith("."), name
        assert name.rpartition(".")[2].islower(), name  # snake_case everywhere


def test_the_reference_page_is_generated_from_the_table() -> None:
    from corral import _config

    page = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
    assert page.read_text() == _config.reference_markdown(), (
        "docs/configuration.md is stale: run scripts/make_config_docs.py"
    )
    for name in _config._FIELDS:
        assert f"`{name.rpartition('.')[2]}`" in page.read_text()


@pytest.mark.parametrize(
    "toml",
    [
        "[code_interpreter]\nmaxCalls = 5\ntimeoutMs = 900\n",
        "[code_interpreter]\nmax_calls = 5\ntimeout_ms = 900\n",
    ],
)
def test_camel_case_aliases_and_snake_case_names_read_the_same(tmp_path: Path, toml: str) -> None:
    path = tmp_path / "corral.toml"
    path.write_text(toml)
    config = Config.load(flags={"config": path}, environ={})
    assert table_values(config.raw_toml, "code_interpreter") == {"max_calls": 5, "timeout_ms": 900}
    assert table_values(config.raw_toml, "mcp") == {}


def test_one_default_timeout_everywhere() -> None:
    """Seed 002's timeoutMs 30000: the server, the CLI (both Config), the Python API and the
    tools (so MCP) agree."""
    assert DEFAULT_LIMITS.timeout == 30.0
    assert Config().execution_timeout == DEFAULT_LIMITS.timeout
    assert Config().limits() == DEFAULT_LIMITS
    assert DEFAULT_CODE_INTERPRETER_CONFIG.timeout_ms / 1000 == DEFAULT_LIMITS.timeout


def test_container_mode_keeps_dials_60_second_timeout() -> None:
    """DIAL's interpreter container hard-codes 60 s; gateway mode keeps the one 30 s default,
    and a timeout that is set wins in both modes."""
    assert Config(mode="container").limits().timeout == 60.0
    assert Config(mode="gateway").limits().timeout == 30.0
    container = Config.load(flags={"mode": "container"}, environ={"CORRAL_TIMEOUT": "12"})
    assert container.limits().timeout == 12.0
    with pytest.raises(ConfigError, match="timeout must be positive"):
        Config(mode="container", timeout=0)


def test_connection_guards_from_file_and_environment(tmp_path: Path) -> None:
    defaults = Config.load(environ={})
    assert (defaults.header_timeout, defaults.max_connections_per_client) == (10.0, 512)
    assert defaults.trusted_proxies == ()
    path = tmp_path / "corral.toml"
    path.write_text(
        "[server]\nheader_timeout = 2.5\nmax_connections_per_client = 8\n"
        'trusted_proxies = ["10.1.2.3/8", "192.0.2.7", "2001:db8::/32"]\n'
    )
    config = Config.load(flags={"config": str(path)}, environ={})
    assert (config.header_timeout, config.max_connections_per_client) == (2.5, 8)
    assert config.trusted_proxies == ("10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32")
    env = {"CORRAL_TRUSTED_PROXIES": "127.0.0.2, ::1", "CORRAL_HEADER_TIMEOUT": "1"}
    from_env = Config.load(environ=env)
    assert from_env.trusted_proxies == ("127.0.0.2/32", "::1/128")
    assert from_env.header_timeout == 1.0
    assert Config.load(flags={"header_timeout": "3"}, environ=env).header_timeout == 3.0


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"CORRAL_TRUSTED_PROXIES": "localhost"}, "'localhost' is not an address or a CIDR"),
        ({"CORRAL_TRUSTED_PROXIES": "10.0.0.0/33"}, "not an address or a CIDR"),
        ({"CORRAL_HEADER_TIMEOUT": "0"}, "header_timeout must be positive"),
        ({"CORRAL_MAX_CONNECTIONS_PER_CLIENT": "-1"}, "max_connections_per_client"),
    ],
)
def test_connection_guards_refuse_bad_values(environ: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        Config.load(environ=environ)
    with pytest.raises(ConfigError, match="trusted_proxies"):
        Config(trusted_proxies=("*",))


def test_open_run_code_from_file_and_environment(tmp_path: Path) -> None:
    assert Config.load(environ={}).open_run_code is False
    path = tmp_path / "corral.toml"
    path.write_text("[server]\nopen_run_code = true\n")
    assert Config.load(flags={"config": str(path)}, environ={}).open_run_code is True
    assert Config.load(environ={"CORRAL_OPEN_RUN_CODE": "1"}).open_run_code is True
    assert Config.load(environ={"CORRAL_OPEN_RUN_CODE": "false"}).open_run_code is False
    with pytest.raises(ConfigError, match="CORRAL_OPEN_RUN_CODE"):
        Config.load(environ={"CORRAL_OPEN_RUN_CODE": "maybe"})
    path.write_text('[server]\nopen_run_code = "yes"\n')
    with pytest.raises(ConfigError, match="open_run_code"):
        Config.load(flags={"config": str(path)}, environ={})
    path.write_text("[server]\nport = true\n")
    with pytest.raises(ConfigError, match="port"):
        Config.load(flags={"config": str(path)}, environ={})


def test_uid_range_from_the_file_and_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "corral.toml"
    path.write_text("[engine]\nuid_range = [3000000, 4096]\n")
    config = Config.load(flags={"config": str(path)}, environ={})
    assert config.uid_range == (3_000_000, 4096)
    assert config.engine_options()["uid_range"] == (3_000_000, 4096)
    from_env = Config.load(environ={"CORRAL_UID_RANGE": "4000000:16"})
    assert from_env.uid_range == (4_000_000, 16)
    assert "uid_range" not in Config.load(environ={}).engine_options()


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("60000:10000", "start at"),  # among system and login uids, and holds nobody
        ("1000:10", "start at"),
        ("3000000:1", "at least 2"),
        ("4294967000:1000", "end below"),
        ("3000000", "first, count"),
    ],
)
def test_a_bad_uid_range_is_a_config_error(value: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        Config.load(environ={"CORRAL_UID_RANGE": value})
