//! Certificates for TLS tests, made fresh for each test with rcgen: a CA, a server certificate
//! for `localhost` and `127.0.0.1` signed by it, a client certificate signed by it, and a
//! second CA that signed none of them (to show that an untrusted server is refused).

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// PEM files in a temporary directory, removed when dropped.
#[derive(Debug)]
pub struct Certificates {
    /// The CA that signed the server and client certificates.
    pub ca: PathBuf,
    /// The server's certificate (`localhost`, `127.0.0.1`).
    pub server_cert: PathBuf,
    /// The server certificate's key.
    pub server_key: PathBuf,
    /// A client certificate, for mutual TLS.
    pub client_cert: PathBuf,
    /// The client certificate's key.
    pub client_key: PathBuf,
    /// A CA that signed nothing here.
    pub other_ca: PathBuf,
    _dir: tempfile::TempDir,
}

impl Certificates {
    /// Makes a fresh set.
    pub fn generate() -> Self {
        Self::for_server_names(&["localhost", "127.0.0.1"])
    }

    /// Makes a fresh set whose server certificate holds only `names` (to show that a client
    /// checks the name it connected by).
    pub fn for_server_names(names: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory for certificates");
        let write = |name: &str, pem: String| -> PathBuf {
            let path = dir.path().join(name);
            std::fs::write(&path, pem).expect("write a PEM file");
            path
        };
        let (ca_pem, issuer) = authority("Tollgate test CA");
        let (other_pem, _) = authority("Another CA");
        let (server_cert, server_key) = leaf(
            &issuer,
            names.iter().map(|name| (*name).to_owned()).collect(),
        );
        let (client_cert, client_key) = leaf(&issuer, vec!["tollgate-client".to_owned()]);
        Self {
            ca: write("ca.pem", ca_pem),
            server_cert: write("server.pem", server_cert),
            server_key: write("server-key.pem", server_key),
            client_cert: write("client.pem", client_cert),
            client_key: write("client-key.pem", client_key),
            other_ca: write("other-ca.pem", other_pem),
            _dir: dir,
        }
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        self._dir.path()
    }
}

/// A self-signed CA: its certificate in PEM, and what signs with it.
fn authority(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("a CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let certificate = params.self_signed(&key).expect("a self-signed CA");
    (certificate.pem(), Issuer::new(params, key))
}

/// A certificate for `names` signed by `issuer`: the certificate and its key, in PEM.
fn leaf(issuer: &Issuer<'static, KeyPair>, names: Vec<String>) -> (String, String) {
    let key = KeyPair::generate().expect("a key");
    let params = CertificateParams::new(names).expect("certificate parameters");
    let certificate = params
        .signed_by(&key, issuer)
        .expect("a signed certificate");
    (certificate.pem(), key.serialize_pem())
}
