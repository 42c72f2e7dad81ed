//! Certificates read from PEM files, for the TLS of the binary's listeners and of its clients
//! (the proxy's upstream, the xDS management server): kept here, below both, so that every
//! certificate file is read and its errors said one way (the `pem` feature).

use std::path::Path;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// The certificate authorities in a PEM file, for verifying peers;
/// `flag` names the file in errors.
pub fn root_store(path: &Path, flag: &str) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in certificates(path, flag)? {
        roots
            .add(certificate)
            .map_err(|error| format!("{flag} {}: {error}", path.display()))?;
    }
    Ok(roots)
}

/// Every certificate in a PEM file, at least one.
pub fn certificates(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let found = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|error| format!("{flag} {}: {error}", path.display()))?;
    if found.is_empty() {
        return Err(format!(
            "{flag} {}: no certificate in the file",
            path.display()
        ));
    }
    Ok(found)
}
