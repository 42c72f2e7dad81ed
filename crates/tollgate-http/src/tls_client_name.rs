//! Client certificates that must name a given DNS name besides chaining to the CA, as
//! envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN asks: a CA shared by many services then admits
//! only the one client it is meant for.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};

/// A client verifier that also requires the certificate to be valid for one DNS name.
#[derive(Debug)]
pub(crate) struct NamedClients {
    chain: Arc<dyn ClientCertVerifier>,
    name: ServerName<'static>,
}

impl NamedClients {
    /// Clients `chain` accepts whose certificates name `name`.
    pub(crate) fn new(chain: Arc<dyn ClientCertVerifier>, name: &str) -> Result<Self, String> {
        let name = ServerName::try_from(name.to_owned())
            .map_err(|error| format!("--tls-client-san {name:?}: {error}"))?;
        Ok(Self { chain, name })
    }
}

impl ClientCertVerifier for NamedClients {
    fn offer_client_auth(&self) -> bool {
        self.chain.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.chain.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.chain.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let verified = self
            .chain
            .verify_client_cert(end_entity, intermediates, now)?;
        let certificate = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))?;
        certificate
            .verify_is_valid_for_subject_name(&self.name)
            .map_err(|_| Error::InvalidCertificate(CertificateError::NotValidForName))?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}
