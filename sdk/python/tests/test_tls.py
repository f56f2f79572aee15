"""TLS with client certificates: the SDK's ssl.SSLContext reaches the wire,
and a refused or untrusted certificate is an UnauthenticatedError, not an
outage retried elsewhere. The certificates are made for the run by openssl;
the endpoint is the fake wire (tests/fakegw.py) behind TLS that requires a
client certificate."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import leasegate  # noqa: E402

from fakegw import FakeGateway, Reply  # noqa: E402


def pki(d: Path) -> dict[str, str]:
    """A throwaway CA, a server certificate for 127.0.0.1 and a client certificate."""

    def ssl_(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    f = lambda x: str(d / x)  # noqa: E731
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    ssl_("req", "-x509", *ec, "-days", "1", "-subj", "/CN=leasegate test CA", "-keyout", f("ca.key"), "-out", f("ca.pem"))
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    ssl_("req", *ec, "-subj", "/CN=127.0.0.1", "-keyout", f("server.key"), "-out", f("server.csr"))
    ssl_("x509", "-req", "-in", f("server.csr"), "-CA", f("ca.pem"), "-CAkey", f("ca.key"), "-CAcreateserial", "-days", "1", "-extfile", f("server.ext"), "-out", f("server.pem"))
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    ssl_("req", *ec, "-subj", "/O=tenant-a/CN=sdk-test", "-keyout", f("client.key"), "-out", f("client.csr"))
    ssl_("x509", "-req", "-in", f("client.csr"), "-CA", f("ca.pem"), "-CAkey", f("ca.key"), "-CAcreateserial", "-days", "1", "-extfile", f("client.ext"), "-out", f("client.pem"))
    return {k: f(k + ".pem") for k in ("ca", "server", "client")} | {"server_key": f("server.key"), "client_key": f("client.key")}


@unittest.skipUnless(shutil.which("openssl"), "openssl is not on PATH")
class TLSTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.certs = pki(Path(cls.tmp.name))
        srv = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        srv.load_cert_chain(cls.certs["server"], cls.certs["server_key"])
        srv.load_verify_locations(cls.certs["ca"])
        srv.verify_mode = ssl.CERT_REQUIRED
        cls.fake = FakeGateway({"TryAcquire": lambda r, h: Reply({"acquired": False})}, tls=srv)

    @classmethod
    def tearDownClass(cls):
        cls.fake.close()
        cls.tmp.cleanup()

    def context(self, trust: bool = True, client_cert: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.certs["ca"] if trust else None)
        if client_cert:
            ctx.load_cert_chain(self.certs["client"], self.certs["client_key"])
        return ctx

    def test_a_trusted_client_certificate_is_served(self):
        c = leasegate.Client([self.fake.url], ssl_context=self.context())
        with self.assertRaises(leasegate.NotAcquiredError):
            c.try_acquire("x", ttl=5)

    def test_a_scheme_less_endpoint_is_https_under_tls(self):
        c = leasegate.Client([self.fake.url.removeprefix("https://")], ssl_context=self.context())
        self.assertTrue(c.endpoints[0].startswith("https://"))
        with self.assertRaises(leasegate.NotAcquiredError):
            c.try_acquire("x", ttl=5)

    def test_without_a_client_certificate_unauthenticated(self):
        n = self.fake.count("TryAcquire")
        c = leasegate.Client([self.fake.url], ssl_context=self.context(client_cert=False))
        with self.assertRaises(leasegate.UnauthenticatedError):
            c.try_acquire("x", ttl=5)
        self.assertEqual(self.fake.count("TryAcquire"), n)

    def test_an_untrusted_gateway_certificate_unauthenticated(self):
        c = leasegate.Client([self.fake.url], ssl_context=self.context(trust=False))
        with self.assertRaises(leasegate.UnauthenticatedError):
            c.try_acquire("x", ttl=5)


if __name__ == "__main__":
    unittest.main()
