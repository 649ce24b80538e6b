"""The deployment examples (examples/deploy: compose and Kubernetes) and the Dockerfile fit
ecron as it is: their files parse and follow their tools' schemas, every file they mount
exists, every ``ECRON_*`` variable is one ecron reads, the configs they mount load with
ecron's own loader, the probes and scrapes name ecron's real endpoints and ports, and the
commands they run are ecron's. No container engine runs here: these checks are what can be
known without one (docs/deploy.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import kubernetes_validate
import pytest
import yaml
from sqlalchemy.engine import make_url

from ecron.api.access import OPEN_PATHS
from ecron.config import load_config
from ecron.config.summary import validation_report
from tests.support.deploy import (
    COMPOSE_FILE,
    DEPLOY,
    KUBERNETES,
    ROOT,
    bind_mounts,
    command,
    compose,
    container_ports,
    containers,
    documents,
    ecron_nodes,
    environment,
    host_ports,
    image_command,
    image_environment,
    instructions,
    kubernetes_object,
    kubernetes_objects,
    mount_config_map,
    node_config_dir,
    node_environment,
    parse_cli,
    port_number,
    resolve_env,
    unknown_ecron_variables,
    yaml_files,
)

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
DASHBOARD = ROOT / "examples" / "grafana-dashboard.json"
#: check-jsonschema with the compose-spec schema it ships (no download).
CHECK_COMPOSE = ("check_jsonschema", "--builtin-schema", "vendor.compose-spec")


def listen_port(directory: Path, env: dict[str, str]) -> int:
    """The port ecron listens on with this config directory and environment."""
    return load_config(directory, env).daemon.host_port[1]


def test_every_yaml_file_under_examples_deploy_parses_into_mappings() -> None:
    """Each YAML file (each document of a multi-document file) parses with PyYAML into a
    mapping; there are compose and Kubernetes files to parse."""
    files = yaml_files()
    assert any(p.is_relative_to(KUBERNETES) for p in files)
    assert COMPOSE_FILE in files
    for path in files:
        docs = documents(path)
        assert docs, f"{path} is empty"
        assert all(isinstance(doc, dict) for doc in docs), f"{path}: a document is no mapping"


# --- ecron's settings and commands ------------------------------------------------------------


def test_the_settings_check_accepts_the_variables_ecron_reads_and_names_the_others() -> None:
    """``unknown_ecron_variables`` passes the variables ecron's loader reads (one per
    daemon key, the database alias) and names a misspelt one, a file-only key (``notify``)
    and a nested key's parent; other programs' variables are not its business."""
    read = ["ECRON_DATABASE_URL", "ECRON_DATABASE", "ECRON_LISTEN", "ECRON_LOG_LEVEL"]
    assert unknown_ecron_variables([*read, "POSTGRES_PASSWORD"]) == []
    wrong = ["ECRON_DATABSE_URL", "ECRON_NOTIFY", "ECRON_LOG", "ECRON_API_TOKN"]
    assert unknown_ecron_variables([*read, *wrong]) == sorted(wrong)


def test_every_ecron_variable_the_examples_set_is_one_ecron_reads() -> None:
    """The ``ECRON_*`` names set by the Dockerfile, the compose services and the Kubernetes
    containers are all read by ecron (the check is asked of ecron's loader, not of a list)."""
    names = set(image_environment())
    for service in compose()["services"].values():
        names |= set(environment(service))
    for _, obj in kubernetes_objects():
        for container in containers(obj):
            names |= {variable["name"] for variable in container.get("env") or []}
    assert {"ECRON_DATABASE_URL", "ECRON_API_TOKEN", "ECRON_LISTEN"} <= names
    assert unknown_ecron_variables(names) == []


def test_a_command_line_ecron_does_not_have_is_refused() -> None:
    """The CLI check parses with ecron's click commands: an unknown command, an unknown
    option and another program are refused; ``ecron db upgrade -c DIR`` is accepted."""
    assert parse_cli(["ecron", "db", "upgrade", "-c", "/x"]) == (
        "ecron db upgrade",
        {"directory": "/x"},
    )
    for args in (["ecron", "serve"], ["ecron", "run", "--port", "1"], ["python", "-m", "ecron"]):
        with pytest.raises(click.ClickException):
            parse_cli(args)


def test_the_dockerfile_runs_ecron_run_as_a_non_root_user_with_a_healthz_check() -> None:
    """The image is slim Python 3.11, installs the repository, runs ``ecron run -c DIR`` (a
    real command of the CLI) as a non-root user, and its HEALTHCHECK asks ``/healthz`` on the
    port ``ECRON_LISTEN`` gives, which it also EXPOSEs."""
    assert instructions("FROM")[-1].value[0] == "python:3.11-slim"
    assert any("pip install" in run.value[0] for run in instructions("RUN"))
    for copy in instructions("COPY"):
        assert all((ROOT / source).exists() for source in copy.value[:-1]), copy.original
    assert instructions("USER")[-1].value[0] not in ("root", "0")
    path, params = parse_cli(image_command())
    assert path == "ecron run"
    assert params["directory"] in instructions("VOLUME")[-1].value
    port = int(image_environment()["ECRON_LISTEN"].rpartition(":")[2])
    assert instructions("EXPOSE")[-1].value == (str(port),)
    (check,) = instructions("HEALTHCHECK")
    url = urlsplit(re.findall(r"https?://[^'\"\s]+", " ".join(check.value))[0])
    assert (url.path, url.port) == ("/healthz", port)
    assert url.path in OPEN_PATHS


# --- compose ----------------------------------------------------------------------------------


def test_the_compose_file_follows_the_compose_specification() -> None:
    """check-jsonschema's bundled compose-spec schema (no network) accepts the file."""
    result = subprocess.run(
        [sys.executable, "-m", *CHECK_COMPOSE, str(COMPOSE_FILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_file_compose_builds_or_mounts_exists_in_the_repository() -> None:
    """Build contexts hold a Dockerfile, every bind mount's source exists, every named
    volume is declared, and the example service a container runs is a file the image copies
    from the repository."""
    services = compose()["services"]
    declared = set(compose().get("volumes") or {})
    for name, service in services.items():
        for volume in service.get("volumes") or []:
            source = str(volume).split(":")[0]
            assert source.startswith((".", "/")) or source in declared, f"{name}: {source}"
        if "build" in service:
            build = service["build"]
            context = build if isinstance(build, str) else build["context"]
            assert (COMPOSE_FILE.parent / context / "Dockerfile").resolve() == ROOT / "Dockerfile"
        for target, source in bind_mounts(service).items():
            assert source.exists(), f"{name}: {source} (mounted at {target}) does not exist"
    args = command(services["jobs"])
    assert args[0] == "python"
    assert (ROOT / args[1]).is_file()  # relative to WORKDIR, where COPY put examples/
    assert instructions("WORKDIR")[-1].value == ("/srv/ecron",)


def test_two_compose_nodes_share_one_postgresql_and_publish_the_port_they_listen_on() -> None:
    """Two services run ``ecron run``, on the same database URL, which names the postgres
    service with its user, password and database; each publishes the port ecron listens on
    with the config and environment it gets, on host ports of its own."""
    spec = compose()
    nodes = ecron_nodes(spec)
    assert len(nodes) == 2
    urls = {
        load_config(node_config_dir(s), node_environment(s)).daemon.database for s in nodes.values()
    }
    assert len(urls) == 1
    url = make_url(urls.pop())
    postgres = spec["services"][url.host]
    pg_env = environment(postgres)
    assert postgres["image"].startswith("postgres:")
    assert (url.username, url.password, url.database) == (
        pg_env["POSTGRES_USER"],
        pg_env["POSTGRES_PASSWORD"],
        pg_env["POSTGRES_DB"],
    )
    for name, service in nodes.items():
        port = listen_port(node_config_dir(service), node_environment(service))
        assert container_ports(service) == [port], name
        assert url.host in service["depends_on"], name
    published = [port for service in nodes.values() for port in host_ports(service)]
    assert len(set(published)) == len(published)


def test_the_config_the_compose_nodes_mount_passes_ecron_validate() -> None:
    """``ecron validate``'s code path accepts each node's config directory with the node's
    environment, and every task calls a compose service on the port it listens on."""
    services = compose()["services"]
    for name, service in ecron_nodes(compose()).items():
        directory, env = node_config_dir(service), node_environment(service)
        code, lines = validation_report(directory, NOW, env)
        assert code == 0, f"{name}: " + "\n".join(lines)
        for spec in load_config(directory, env).tasks.values():
            for number in range(1, len(spec.steps) + 1) if spec.steps else [None]:
                url = urlsplit(spec.call(number).url)
                args = command(services[str(url.hostname)])
                assert args[args.index("--port") + 1] == str(url.port), spec.name


def test_compose_nodes_read_the_report_stream_of_the_redis_service_the_worker_writes_to() -> None:
    """Both nodes have a ``queue`` on the compose Redis service; the queue worker is given
    the same Redis; a task in mode queue calls it; and the image the nodes run installs
    the ``redis`` extra, which a queue needs."""
    spec = compose()
    queues = {
        load_config(node_config_dir(s), node_environment(s)).daemon.queue
        for s in ecron_nodes(spec).values()
    }
    assert len(queues) == 1
    (queue,) = queues
    assert queue is not None
    redis = spec["services"][str(urlsplit(queue.url).hostname)]
    assert redis["image"].startswith("redis:")
    worker = command(spec["services"]["queue-worker"])
    assert worker[worker.index("--redis") + 1] == queue.url
    (node,) = list(ecron_nodes(spec).values())[:1]
    tasks = load_config(node_config_dir(node), node_environment(node)).tasks.values()
    assert any(t.mode == "queue" and "queue-worker" in str(t.url) for t in tasks)
    assert any("'.[redis]'" in run.value[0] for run in instructions("RUN"))


def test_compose_healthchecks_ask_readyz_of_the_nodes_on_their_listen_port() -> None:
    """Each node's healthcheck asks ``/readyz`` (served without the token) on the port the
    node listens on; the image's own check, on ``/healthz``, is checked with the Dockerfile."""
    for name, service in ecron_nodes(compose()).items():
        test = " ".join(service["healthcheck"]["test"])
        url = urlsplit(re.findall(r"https?://[^'\"\s]+", test)[0])
        port = listen_port(node_config_dir(service), node_environment(service))
        assert (url.path, url.port) == ("/readyz", port), name
        assert url.path in OPEN_PATHS
    assert "healthcheck" in compose()["services"]["jobs"]  # not the image's /healthz check


def prometheus_config() -> dict[str, Any]:
    """The Prometheus config the compose file mounts into the prometheus service."""
    mounts = bind_mounts(compose()["services"]["prometheus"])
    (config,) = documents(mounts["/etc/prometheus/prometheus.yml"])
    assert isinstance(config, dict)
    return config


def test_prometheus_scrapes_metrics_of_both_compose_nodes() -> None:
    """The scrape targets are exactly the nodes, each on its listen port, at ``/metrics``
    (served without the API token, which Prometheus does not send)."""
    nodes = ecron_nodes(compose())
    expected = {
        f"{name}:{listen_port(node_config_dir(s), node_environment(s))}"
        for name, s in nodes.items()
    }
    (job,) = prometheus_config()["scrape_configs"]
    targets = {target for group in job["static_configs"] for target in group["targets"]}
    assert targets == expected
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert "/metrics" in OPEN_PATHS


@pytest.mark.skipif(
    shutil.which("promtool") is None and os.environ.get("CI") != "true",
    reason="promtool (Debian package prometheus) is not installed",
)
def test_prometheus_config_passes_promtool_check_config() -> None:
    """``promtool check config`` accepts the compose example's Prometheus config."""
    promtool = shutil.which("promtool")
    assert promtool is not None, "CI must have promtool (apt-get install prometheus)"
    path = bind_mounts(compose()["services"]["prometheus"])["/etc/prometheus/prometheus.yml"]
    result = subprocess.run(
        [promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- Grafana ----------------------------------------------------------------------------------


def grafana_provisioning(kind: str) -> list[dict[str, Any]]:
    """The provisioned ``datasources`` or dashboard ``providers`` of the compose Grafana."""
    folder = bind_mounts(compose()["services"]["grafana"])["/etc/grafana/provisioning"]
    key = "datasources" if kind == "datasources" else "providers"
    return [
        item for path in sorted((folder / kind).glob("*.yaml")) for item in documents(path)[0][key]
    ]


def test_grafana_provisions_the_repository_dashboard_and_the_prometheus_service() -> None:
    """The file provider reads the folder the compose file mounts examples/grafana-dashboard.json
    into, the home dashboard is that file, and the default data source is the prometheus
    service on the port it serves."""
    grafana = compose()["services"]["grafana"]
    mounts = bind_mounts(grafana)
    (provider,) = grafana_provisioning("dashboards")
    assert provider["type"] == "file"
    folder = provider["options"]["path"].rstrip("/")
    shown = {source for target, source in mounts.items() if target.rpartition("/")[0] == folder}
    assert shown == {DASHBOARD}
    assert mounts[environment(grafana)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]] == DASHBOARD
    (source,) = grafana_provisioning("datasources")
    url = urlsplit(source["url"])
    assert (source["type"], source["isDefault"]) == ("prometheus", True)
    assert url.port in container_ports(compose()["services"][str(url.hostname)])


def test_every_data_source_the_dashboard_names_resolves_in_the_provisioned_grafana() -> None:
    """File provisioning does not replace ``${DS_PROMETHEUS}`` (only an import does), so each
    data source the dashboard names is Grafana's own, a provisioned uid, or a variable of
    type datasource, which picks the default provisioned data source of its type."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    sources = grafana_provisioning("datasources")
    uids = {source["uid"]: source["type"] for source in sources}
    defaults = {source["type"] for source in sources if source.get("isDefault")}
    refs = list(datasource_refs(dashboard))
    assert len(refs) > 10
    for ref in refs:
        uid = ref.get("uid", "")
        reference = re.fullmatch(r"\$\{(\w+)\}|\$(\w+)", uid)
        if uid == "-- Grafana --":
            continue
        if reference is None:
            assert uids.get(uid) == ref["type"], f"no provisioned {ref['type']} data source {uid!r}"
            continue
        variable = variables.get(reference.group(1) or reference.group(2))
        assert variable is not None, f"{uid} names no variable of the dashboard"
        assert (variable["type"], variable["query"]) == ("datasource", ref["type"]), uid
        assert ref["type"] in defaults, f"no default {ref['type']} data source for {uid}"


def datasource_refs(node: Any) -> Iterator[dict[str, Any]]:
    """Every ``datasource`` object in a dashboard's JSON (panels, targets, variables)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource" and isinstance(value, dict):
                yield value
            else:
                yield from datasource_refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from datasource_refs(item)


# --- Kubernetes -------------------------------------------------------------------------------


def ecron_container() -> dict[str, Any]:
    """The container of the ecron Deployment."""
    (container,) = containers(kubernetes_object("Deployment", "ecron"))
    return container


def mounted_config(directory: Path) -> tuple[Path, dict[str, str]]:
    """The ecron Deployment's config directory, written under ``directory`` as its volumes
    show it, and the container's environment (Secrets resolved, the image's ENV under it)."""
    deployment = kubernetes_object("Deployment", "ecron")
    container = ecron_container()
    _, params = parse_cli(container["command"])
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == params["directory"]]
    mount_config_map(volumes[mount["name"]], directory)
    env = {**image_environment(), **resolve_env(container)}
    for other in container["volumeMounts"]:  # the Secret's tokens file, under directory
        if other is not mount:
            where = directory / "mounts" / other["mountPath"].strip("/")
            mount_config_map(volumes[other["name"]], where)
            env = {k: v.replace(other["mountPath"], str(where)) for k, v in env.items()}
    return directory, env


def test_every_kubernetes_object_follows_the_kubernetes_api_schema() -> None:
    """kubernetes-validate (schemas shipped in the package) accepts each object strictly: a
    misspelt field is an error, not ignored as the API server would."""
    objects = kubernetes_objects()
    assert {"Deployment", "Service", "ConfigMap", "Secret"} <= {o["kind"] for _, o in objects}
    for path, obj in objects:
        try:
            kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{path.name}: {obj['kind']} {obj['metadata']['name']}: {exc.message}")


def test_the_kustomization_applies_every_manifest_of_the_directory() -> None:
    """``kubectl apply -k`` applies every other YAML file of the directory, and only those."""
    (kustomization,) = documents(KUBERNETES / "kustomization.yaml")
    files = {p.name for p in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)


def test_the_deployment_runs_two_replicas_probed_on_healthz_and_readyz_at_the_listen_port(
    tmp_path: Path,
) -> None:
    """Two replicas; liveness asks ``/healthz`` and readiness ``/readyz``, both on the
    container port that ecron listens on with the mounted config and environment."""
    deployment = kubernetes_object("Deployment", "ecron")
    assert deployment["spec"]["replicas"] == 2
    container = ecron_container()
    port = listen_port(*mounted_config(tmp_path))
    assert port in [p["containerPort"] for p in container["ports"]]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert (get["path"], port_number(container, get["port"])) == (path, port), probe
        assert path in OPEN_PATHS  # kubelet sends no API token


def test_the_configmap_as_the_deployment_mounts_it_passes_ecron_validate(tmp_path: Path) -> None:
    """``ecron validate``'s code path accepts the mounted ecron.yaml and tasks with the
    container's environment; the tasks are there, and the database is PostgreSQL."""
    directory, env = mounted_config(tmp_path)
    assert (directory / "ecron.yaml").is_file()
    code, lines = validation_report(directory, NOW, env)
    assert code == 0, "\n".join(lines)
    config = load_config(directory, env)
    assert config.tasks
    assert config.daemon.database.startswith("postgresql+asyncpg://")
    assert config.daemon.api_token and config.daemon.secret
    assert {caller.role for caller in config.daemon.callers} == {"admin", "operator", "viewer"}


def test_the_database_url_names_the_postgres_service_with_its_credentials() -> None:
    """The Secret's database URL names a Service of the example on one of its ports, with
    the user, password and database the PostgreSQL StatefulSet is created with."""
    url = make_url(resolve_env(ecron_container())["ECRON_DATABASE_URL"])
    service = kubernetes_object("Service", str(url.host))
    assert (url.port or 5432) in [p["port"] for p in service["spec"]["ports"]]
    (postgres,) = containers(kubernetes_object("StatefulSet", str(url.host)))
    env = resolve_env(postgres)
    credentials = (env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], env["POSTGRES_DB"])
    assert (url.username, url.password, url.database) == credentials


def test_every_service_selects_pods_listening_on_its_target_ports() -> None:
    """Each Service's selector matches a workload's pod labels and its target ports are
    ports of that workload's container; every task URL names a Service and one of its ports."""
    services = {}
    for _, service in [(p, o) for p, o in kubernetes_objects() if o["kind"] == "Service"]:
        selector = service["spec"]["selector"].items()
        pods = [
            c
            for _, obj in kubernetes_objects()
            for c in containers(obj)
            if selector <= obj["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert pods, f"Service {service['metadata']['name']!r} selects no pod"
        for port in service["spec"]["ports"]:
            assert all(port_number(c, port["targetPort"]) for c in pods)
        services[service["metadata"]["name"]] = [p["port"] for p in service["spec"]["ports"]]
    (tasks,) = documents_of_config_map("tasks.yaml")
    for task in tasks["tasks"]:
        for call in task.get("steps") or [task]:
            url = urlsplit(call["url"])
            assert url.port in services.get(str(url.hostname), []), call["url"]


def documents_of_config_map(key: str) -> list[Any]:
    """The YAML documents of one key of the ecron ConfigMap."""
    return list(yaml.safe_load_all(kubernetes_object("ConfigMap", "ecron-config")["data"][key]))


def test_every_container_has_resource_requests_and_limits() -> None:
    """CPU and memory requests and limits on every container of every workload."""
    found = [c for _, obj in kubernetes_objects() for c in containers(obj)]
    assert len(found) >= 3
    for container in found:
        for bound in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][bound]), container["name"]


def test_the_kubernetes_containers_of_the_ecron_image_run_its_cli_or_its_example_service() -> None:
    """A container of the ecron image runs a real command of ecron's CLI, or the example
    service the image copies from the repository."""
    for _, obj in kubernetes_objects():
        for container in containers(obj):
            if not container["image"].startswith("ecron:"):
                continue
            args = container.get("command") or image_command()
            if args[0] == "python":
                assert (ROOT / args[1]).is_file(), args
            else:
                assert parse_cli(args)[0] == "ecron run", args


# --- documentation ----------------------------------------------------------------------------


def test_docs_deploy_names_every_file_of_the_examples_and_the_readme_links_it() -> None:
    """docs/deploy.md says what each file under examples/deploy is for (it names each by its
    path under examples/deploy), and README.md links to it."""
    text = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    for path in sorted(p for p in DEPLOY.rglob("*") if p.is_file()):
        assert str(path.relative_to(DEPLOY)) in text, f"docs/deploy.md does not name {path}"
    assert "(docs/deploy.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
