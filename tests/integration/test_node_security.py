"""srv6pm-node refuses to serve without credentials, and enforces the ones it is given:
a bearer token, TLS, and mutual TLS (certificates made here with openssl)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import grpc
import pytest

from srv6pm.node.v1 import srv6_manager_pb2 as pb
from srv6pm.node.v1 import srv6_manager_pb2_grpc as pb_grpc
from srv6pm.node.v1 import srv6_pm_pb2, srv6_pm_pb2_grpc
from srv6pm_topos.agents import agent_executable, start_agent
from srv6pm_topos.lab import Lab
from tests.support import require_tool

pytestmark = pytest.mark.netns


def test_refuses_to_start_without_credentials():
    out = subprocess.run(
        [agent_executable(), "--listen", "[::1]:0"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 2
    assert "no credentials" in out.stderr and "--insecure" in out.stderr


def test_refuses_half_tls_configuration(tmp_path):
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    out = subprocess.run(
        [agent_executable(), "--listen", "[::1]:0", "--tls-cert", str(cert)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "--tls-key" in out.stderr


def test_environment_configures_the_agent(net: Lab, tmp_path: Path):
    """SRV6PM_NODE_LISTEN and SRV6PM_NODE_INSECURE stand in for the flags."""
    node = net.add_node("r1")
    sock = tmp_path / "env.sock"
    env = {
        "SRV6PM_NODE_LISTEN": f"unix:{sock}",
        "SRV6PM_NODE_INSECURE": "true",
        "SRV6PM_NODE_STATE_DIR": str(tmp_path / "state"),
        "PATH": "/usr/bin:/bin",
    }
    node.popen([agent_executable()], env=env, stderr=subprocess.DEVNULL)
    channel = grpc.insecure_channel(f"unix:{sock}")
    grpc.channel_ready_future(channel).result(timeout=20)
    assert pb_grpc.SRv6ManagerStub(channel).ListPaths(pb.ListPathsRequest()).paths == []
    channel.close()


def test_bearer_token(net: Lab, tmp_path: Path):
    node = net.add_node("r1")
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    agent = start_agent(node, tmp_path, security_args=("--token-file", str(token)))
    stub = pb_grpc.SRv6ManagerStub(agent.channel)
    for metadata in (None, [("authorization", "Bearer wrong")], [("authorization", "s3cret-token")]):
        with pytest.raises(grpc.RpcError) as err:
            stub.ListPaths(pb.ListPathsRequest(), metadata=metadata)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # Server-streaming methods are guarded too.
    with pytest.raises(grpc.RpcError) as err:
        list(srv6_pm_pb2_grpc.SRv6PMStub(agent.channel).StreamResults(srv6_pm_pb2.StreamResultsRequest()))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert (
        stub.ListPaths(pb.ListPathsRequest(), metadata=[("authorization", "Bearer s3cret-token")]).paths == []
    )
    assert agent.health() == 1  # health stays open to liveness probes


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    """A CA, a server certificate for "srv6pm-node" and a client certificate, all signed by the CA."""
    require_tool("openssl")
    d = tmp_path / "pki"
    d.mkdir()
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=srv6pm test CA",
        cwd=d,
    )
    for name in ("server", "client"):
        _openssl(
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN=srv6pm-{name}",
            cwd=d,
        )
        (d / f"{name}.ext").write_text(
            "subjectAltName=DNS:srv6pm-node\n" if name == "server" else "extendedKeyUsage=clientAuth\n"
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.pem",
            "-days",
            "1",
            "-extfile",
            f"{name}.ext",
            cwd=d,
        )
    return d


def test_mutual_tls(net: Lab, pki: Path, tmp_path: Path):
    node = net.add_node("r1")
    ca = (pki / "ca.pem").read_bytes()
    client_creds = grpc.ssl_channel_credentials(
        ca, (pki / "client.key").read_bytes(), (pki / "client.pem").read_bytes()
    )
    agent = start_agent(
        node,
        tmp_path,
        security_args=(
            "--tls-cert",
            str(pki / "server.pem"),
            "--tls-key",
            str(pki / "server.key"),
            "--tls-client-ca",
            str(pki / "ca.pem"),
        ),
        credentials=client_creds,
        server_name="srv6pm-node",
    )
    assert pb_grpc.SRv6ManagerStub(agent.channel).ListPaths(pb.ListPathsRequest()).paths == []

    def call(channel: grpc.Channel) -> grpc.StatusCode:
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.SRv6ManagerStub(channel).ListPaths(pb.ListPathsRequest(), timeout=3)
        return err.value.code()

    opts = [("grpc.ssl_target_name_override", "srv6pm-node")]
    no_client_cert = grpc.secure_channel(agent.target, grpc.ssl_channel_credentials(ca), options=opts)
    assert call(no_client_cert) == grpc.StatusCode.UNAVAILABLE
    plaintext = grpc.insecure_channel(agent.target)
    assert call(plaintext) == grpc.StatusCode.UNAVAILABLE
    wrong_name = grpc.secure_channel(
        agent.target, client_creds, options=[("grpc.ssl_target_name_override", "x")]
    )
    assert call(wrong_name) == grpc.StatusCode.UNAVAILABLE
