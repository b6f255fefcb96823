//! A certificate authority made for one emulator, and the loopback server certificate it
//! signs: Azurite accepts bearer tokens only over HTTPS, and clients trust the authority.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The PEM files of one HTTPS emulator, in a directory of their own that is removed with it.
#[derive(Debug)]
pub(crate) struct TlsFiles {
    pub(crate) dir: PathBuf,
    pub(crate) ca_pem: String,
}

impl TlsFiles {
    /// Generates a new authority and a server certificate for `127.0.0.1` and `localhost`,
    /// and writes `ca.pem`, `cert.pem` (server certificate, then the authority) and `key.pem`
    /// into `dir`.
    pub(crate) fn create(dir: PathBuf) -> std::io::Result<Self> {
        let (ca_pem, cert_pem, key_pem) = generate().map_err(std::io::Error::other)?;
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("ca.pem"), &ca_pem)?;
        std::fs::write(dir.join("cert.pem"), format!("{cert_pem}{ca_pem}"))?;
        std::fs::write(dir.join("key.pem"), key_pem)?;
        Ok(Self { dir, ca_pem })
    }

    pub(crate) fn ca_path(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    pub(crate) fn cert_path(&self) -> PathBuf {
        self.dir.join("cert.pem")
    }

    pub(crate) fn key_path(&self) -> PathBuf {
        self.dir.join("key.pem")
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

/// (authority PEM, server certificate PEM, server key PEM).
fn generate() -> Result<(String, String, String), rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "tablekit test authority");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let key = KeyPair::generate()?;
    let mut server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    server
        .distinguished_name
        .push(DnType::CommonName, "127.0.0.1");
    server.use_authority_key_identifier_extension = true;
    server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = server.signed_by(&key, &issuer)?;
    Ok((ca_cert.pem(), cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_hold_an_authority_a_chain_and_a_key() {
        let dir = std::env::temp_dir().join(format!(
            "tablekit-tls-test-{}",
            crate::unique_queue_name("")
        ));
        let files = TlsFiles::create(dir.clone()).unwrap();
        let chain = std::fs::read_to_string(files.cert_path()).unwrap();
        assert_eq!(chain.matches("BEGIN CERTIFICATE").count(), 2);
        assert!(chain.ends_with(&files.ca_pem));
        assert_eq!(
            std::fs::read_to_string(files.ca_path()).unwrap(),
            files.ca_pem
        );
        assert!(
            std::fs::read_to_string(files.key_path())
                .unwrap()
                .contains("PRIVATE KEY")
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
