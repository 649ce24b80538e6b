"""The deployment examples under ``examples/deploy``, read as their tools read them: YAML
documents, compose services (with compose's ``${VAR:-default}`` interpolation), Kubernetes
objects, the Dockerfile (by the ``dockerfile`` package, Docker's own parser) and ecron's
command line (by click), plus the checks the tests apply to them."""

from __future__ import annotations

import base64
import copy
import functools
import re
import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import click
import dockerfile
import yaml

from ecron.cli import cli
from ecron.config.loader import ENV_PREFIX, environment_overrides

ROOT = Path(__file__).resolve().parent.parent.parent
DEPLOY = ROOT / "examples" / "deploy"
COMPOSE_FILE = DEPLOY / "compose" / "compose.yaml"
KUBERNETES = DEPLOY / "kubernetes"
DOCKERFILE = ROOT / "Dockerfile"

#: libyaml's safe loader where PyYAML has it (the wheels do), else the pure-Python one.
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*)|(:\?[^}]*))?\}")


def yaml_files() -> list[Path]:
    """Every YAML file under examples/deploy, in path order."""
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def documents(path: Path) -> list[Any]:
    """The YAML documents of ``path`` (a multi-document file gives several): a fresh copy
    of each, parsed once per file content."""
    return copy.deepcopy(_parsed(path.read_text(encoding="utf-8")))


@functools.cache
def _parsed(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=_SafeLoader))


# --- ecron itself -----------------------------------------------------------------------------


def unknown_ecron_variables(names: Iterable[str]) -> list[str]:
    """The names among ``names`` that start with ``ECRON_`` but that ecron does not read.

    Asked of ecron's own loader (``environment_overrides``, which ``ecron run`` and
    ``ecron validate`` use): a variable is read when setting it alone overrides a key.
    """
    return sorted(
        {
            name
            for name in names
            if name.startswith(ENV_PREFIX) and not environment_overrides({name: "x"})
        }
    )


def parse_cli(args: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """The command path (``ecron run``) and parsed options of the command line ``args``,
    as ecron's click CLI parses it; ``click.ClickException`` when it is not one of ecron's."""
    from ecron.cli import client_cmds, daemon_cmds, demo, validate  # noqa: F401  (registers)

    if not args or args[0] != "ecron":
        raise click.UsageError(f"{list(args)!r} does not run the ecron command")
    command: click.Command = cli
    context = click.Context(cli, info_name="ecron")
    rest = list(args[1:])
    while isinstance(command, click.Group):
        if not rest:
            raise click.UsageError(f"{context.command_path} needs a command")
        sub = command.get_command(context, rest[0])
        if sub is None:
            raise click.UsageError(f"{rest[0]!r} is not a command of {context.command_path}")
        context = click.Context(sub, parent=context, info_name=rest[0])
        command, rest = sub, rest[1:]
    parsed = command.make_context(context.info_name, rest, parent=context.parent)
    return parsed.command_path, dict(parsed.params)


# --- compose ----------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    """The compose file, one document (YAML merge keys applied, as compose applies them)."""
    (document,) = documents(COMPOSE_FILE)
    assert isinstance(document, dict)
    return document


def interpolated(text: str) -> str:
    """``text`` as compose interpolates it with only the required variables set (``MADE``,
    as the user makes them): every ``${VAR:-default}`` becomes its default, every
    ``${VAR:?why}`` its value in ``MADE``; a ``${VAR}`` without either is an error."""

    def default(match: re.Match[str]) -> str:
        if match.group(3) is not None and match.group(1) in MADE:
            return MADE[match.group(1)]
        if match.group(2) is None:
            raise AssertionError(f"{text!r}: ${{{match.group(1)}}} has no default")
        return match.group(2)

    return _VARIABLE.sub(default, text)


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A compose service's environment (mapping or ``KEY=VALUE`` list), interpolated."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.partition("=")[::2] for item in raw)
    return {str(key): interpolated(str(value)) for key, value in raw.items()}


def container_ports(service: dict[str, Any]) -> list[int]:
    """The container side of each published port of a compose service."""
    found = []
    for port in service.get("ports") or []:
        target = port["target"] if isinstance(port, dict) else str(port).rsplit(":", 1)[-1]
        found.append(int(str(target).split("/")[0]))
    return found


def host_ports(service: dict[str, Any]) -> list[str]:
    """The host side (``[IP:]PORT``) of each published port of a compose service."""
    return [str(port).rpartition(":")[0] for port in service.get("ports") or []]


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path to host path of a compose service's bind mounts (relative host paths
    are relative to the compose file); named volumes are left out."""
    found = {}
    for volume in service.get("volumes") or []:
        source, target = str(volume).split(":")[:2]
        if source.startswith((".", "/")):
            found[target] = (COMPOSE_FILE.parent / source).resolve()
    return found


def command(service: dict[str, Any]) -> list[str]:
    """What a compose service runs: its ``command``, else its image's (the Dockerfile's, when
    it is built from the repository)."""
    if "command" in service:
        return [str(arg) for arg in service["command"]]
    assert "build" in service, "a service of another image has no command of ecron's"
    return image_command()


def ecron_nodes(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The compose services that run ``ecron run``."""
    services: dict[str, dict[str, Any]] = spec["services"]
    return {
        name: service
        for name, service in services.items()
        if "build" in service and command(service)[:2] == ["ecron", "run"]
    }


def node_config_dir(service: dict[str, Any]) -> Path:
    """The host directory mounted where a compose node's ``ecron run -c DIR`` reads."""
    _, params = parse_cli(command(service))
    mounts = bind_mounts(service)
    assert params["directory"] in mounts, f"nothing is mounted at {params['directory']}"
    return mounts[params["directory"]]


def node_environment(service: dict[str, Any]) -> dict[str, str]:
    """What a compose node's process sees: the image's ENV, then the service's."""
    return {**image_environment(), **environment(service)}


# --- the Dockerfile ---------------------------------------------------------------------------


def instructions(name: str) -> list[dockerfile.Command]:
    """The Dockerfile's instructions called ``name`` (``CMD``, ``ENV``, ...), in order."""
    return [c for c in dockerfile.parse_file(str(DOCKERFILE)) if c.cmd.upper() == name]


def image_command() -> list[str]:
    """What the image runs: ENTRYPOINT then CMD (the last of each counts)."""
    found: list[str] = []
    for name in ("ENTRYPOINT", "CMD"):
        commands = instructions(name)
        if commands:
            last = commands[-1]
            found += list(last.value) if last.json else ["/bin/sh", "-c", *last.value]
    return found


def image_environment() -> dict[str, str]:
    """The image's ENV variables."""
    found: dict[str, str] = {}
    for env in instructions("ENV"):
        found.update(zip(env.value[::2], env.value[1::2], strict=True))
    return found


# --- Kubernetes -------------------------------------------------------------------------------


def kubernetes_objects() -> list[tuple[Path, dict[str, Any]]]:
    """Every object of the Kubernetes example (kustomization.yaml left out), with its file."""
    return [
        (path, document)
        for path in sorted(KUBERNETES.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for document in documents(path)
    ]


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The containers of a workload's pod template (none for other objects)."""
    if obj["kind"] not in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return []
    found: list[dict[str, Any]] = obj["spec"]["template"]["spec"]["containers"]
    return found


def kubernetes_object(kind: str, name: str) -> dict[str, Any]:
    """The one object of ``kind`` called ``name``."""
    found = [
        o for _, o in kubernetes_objects() if (o["kind"], o["metadata"]["name"]) == (kind, name)
    ]
    assert len(found) == 1, f"{len(found)} {kind} objects are called {name!r}"
    return found[0]


def resolve_env(container: dict[str, Any]) -> dict[str, str]:
    """A container's environment, with ``secretKeyRef`` and ``configMapKeyRef`` values read
    from the example's own Secrets and ConfigMaps (a missing one is an error)."""
    found = {}
    for variable in container.get("env") or []:
        if "value" in variable:
            found[variable["name"]] = str(variable["value"])
            continue
        source = variable["valueFrom"]
        kind, ref = next(
            (kind, source[key])
            for kind, key in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef"))
            if key in source
        )
        found[variable["name"]] = object_value(kubernetes_object(kind, ref["name"]), ref["key"])
    return found


#: What a user makes with ``openssl rand -hex 32`` for each value the examples leave empty
#: (a Secret's token or secret) or require (compose's ``${VAR:?...}``): the examples ship
#: none of their own.
MADE = {
    "ECRON_API_TOKEN": secrets.token_hex(32),
    "ECRON_SECRET": secrets.token_hex(32),
}


def filled(text: str) -> str:
    """A Secret's value as a user fills it in: each empty token (``""``), in a value or in
    the YAML of a tokens file it holds, made with ``openssl rand -hex 32``."""
    if text == "":
        return secrets.token_hex(32)
    return re.sub(r'(token: )""', lambda match: match.group(1) + secrets.token_hex(32), text)


def object_value(obj: dict[str, Any], key: str) -> str:
    """The value of ``key`` in a Secret (``stringData`` or base64 ``data``; its empty
    tokens ``filled`` as a user fills them) or ConfigMap."""
    if key in (obj.get("stringData") or {}):
        value = str(obj["stringData"][key])
        return filled(value) if obj["kind"] == "Secret" else value
    if obj["kind"] == "Secret" and key in (obj.get("data") or {}):
        return base64.b64decode(obj["data"][key]).decode()
    if obj["kind"] == "ConfigMap" and key in (obj.get("data") or {}):
        return str(obj["data"][key])
    raise AssertionError(f"{obj['kind']} {obj['metadata']['name']!r} has no key {key!r}")


def mount_config_map(volume: dict[str, Any], destination: Path) -> None:
    """Write under ``destination`` the files a ``configMap`` or ``secret`` volume shows: its
    ``items`` at their paths, or every key of the object as a file of that name."""
    kind, key, name = (
        ("ConfigMap", "configMap", "name")
        if "configMap" in volume
        else ("Secret", "secret", "secretName")
    )
    source = kubernetes_object(kind, volume[key][name])
    keys = source.get("data") or source.get("stringData") or {}
    items = volume[key].get("items") or [{"key": k, "path": k} for k in keys]
    for item in items:
        target = destination / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(object_value(source, item["key"]), encoding="utf-8")


def port_number(container: dict[str, Any], port: int | str) -> int:
    """A probe's or Service's port, by number or by the container port's name."""
    if isinstance(port, int):
        return port
    named = [p["containerPort"] for p in container.get("ports") or [] if p.get("name") == port]
    assert named, f"container {container['name']!r} has no port named {port!r}"
    return int(named[0])
