//! TLS certificates and credentials given apart from the URL, applied to what the redis
//! crate connects with.

use redis::{ConnectionAddr, ConnectionInfo, TlsCertificates};

use crate::{RedisAuth, RedisTls};

/// The most a certificate or key file may hold: a long chain is a few kilobytes.
const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// The certificates `tls` names, read from their files; `None` when it names none. Errors say
/// which file and why, never what it holds.
pub(crate) fn certificates(tls: &RedisTls) -> Result<Option<TlsCertificates>, String> {
    if !tls.is_set() {
        return Ok(None);
    }
    let client_tls = match (&tls.client_cert, &tls.client_key) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read_pem(cert, "client certificate")?,
            client_key: read_pem(key, "client key")?,
        }),
        (None, None) => None,
        (Some(_), None) => return Err("a redis client certificate needs its key too".to_owned()),
        (None, Some(_)) => return Err("a redis client key needs its certificate too".to_owned()),
    };
    let root_cert = tls
        .ca_file
        .as_ref()
        .map(|path| read_pem(path, "CA file"))
        .transpose()?;
    Ok(Some(TlsCertificates {
        client_tls,
        root_cert,
    }))
}

fn read_pem(path: &std::path::Path, what: &str) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let size = std::fs::metadata(path)
        .map_err(|error| format!("redis {what} {shown}: {error}"))?
        .len();
    if size > MAX_PEM_BYTES {
        return Err(format!(
            "redis {what} {shown}: {size} bytes, more than a PEM file of certificates holds"
        ));
    }
    let bytes = std::fs::read(path).map_err(|error| format!("redis {what} {shown}: {error}"))?;
    if !bytes.windows(11).any(|window| window == b"-----BEGIN ") {
        return Err(format!("redis {what} {shown}: not a PEM file"));
    }
    Ok(bytes)
}

/// Refuses certificates for a URL that does not use TLS: they would be ignored silently.
pub(crate) fn require_tls(info: &ConnectionInfo, shown: &str) -> Result<(), String> {
    match info.addr() {
        ConnectionAddr::TcpTls { .. } => Ok(()),
        _ => Err(format!(
            "TLS certificates are configured for Redis, but {shown} is not a rediss:// URL"
        )),
    }
}

/// `info` with the credentials of `auth` in place of the URL's.
pub(crate) fn with_auth(info: ConnectionInfo, auth: Option<&RedisAuth>) -> ConnectionInfo {
    let Some(auth) = auth else {
        return info;
    };
    let mut settings = info.redis_settings().clone().set_password(&auth.password);
    if let Some(username) = &auth.username {
        settings = settings.set_username(username);
    }
    info.set_redis_settings(settings)
}
