//! Certificates for the TLS tests, made per test with rcgen: a CA, a server certificate for
//! 127.0.0.1 signed by it, a client certificate (CN `postgres`, the user the tests connect as)
//! and a second, unrelated CA to show what a wrong trust root does. Written as PEM files in a
//! temporary directory.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

#[derive(Debug)]
pub struct TestPki {
    dir: tempfile::TempDir,
}

fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

impl TestPki {
    pub fn new() -> TestPki {
        let dir = tempfile::tempdir().expect("temp dir");
        let write = |name: &str, text: String| {
            std::fs::write(dir.path().join(name), text).expect("writing a PEM file");
        };
        let ca = CertifiedIssuer::self_signed(
            ca_params("Carillon test CA"),
            KeyPair::generate().unwrap(),
        )
        .expect("CA");
        write("ca.crt", ca.pem());
        let other =
            CertifiedIssuer::self_signed(ca_params("Some other CA"), KeyPair::generate().unwrap())
                .expect("other CA");
        write("other-ca.crt", other.pem());

        let mut server =
            CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("server params");
        server
            .distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate().unwrap();
        let server_cert = server
            .signed_by(&server_key, &ca)
            .expect("server certificate");
        write("server.crt", server_cert.pem());
        write("server.key", server_key.serialize_pem());

        let mut client = CertificateParams::new(Vec::<String>::new()).expect("client params");
        client
            .distinguished_name
            .push(DnType::CommonName, "postgres");
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_key = KeyPair::generate().unwrap();
        let client_cert = client
            .signed_by(&client_key, &ca)
            .expect("client certificate");
        write("client.crt", client_cert.pem());
        write("client.key", client_key.serialize_pem());
        TestPki { dir }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn ca(&self) -> PathBuf {
        self.file("ca.crt")
    }

    pub fn other_ca(&self) -> PathBuf {
        self.file("other-ca.crt")
    }

    pub fn server_cert(&self) -> PathBuf {
        self.file("server.crt")
    }

    pub fn server_key(&self) -> PathBuf {
        self.file("server.key")
    }

    pub fn client_cert(&self) -> PathBuf {
        self.file("client.crt")
    }

    pub fn client_key(&self) -> PathBuf {
        self.file("client.key")
    }

    /// Copies the server's files into `dir` (a database server reads them as its own user).
    pub fn copy_server_files(&self, dir: &Path) {
        for name in ["ca.crt", "server.crt", "server.key"] {
            std::fs::copy(self.file(name), dir.join(name)).expect("copying a PEM file");
        }
    }
}
