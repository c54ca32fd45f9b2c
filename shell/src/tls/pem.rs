//! Certificates and keys from PEM files, each error naming the file and its key.

use std::path::Path;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Largest PEM file read: a chain or a CA bundle is a few KiB, a system bundle ~250 KiB.
const MAX_PEM_FILE_BYTES: u64 = 4 << 20;

fn read(key: &str, path: &Path) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{key}={}: {e}", path.display()))?;
    if meta.len() > MAX_PEM_FILE_BYTES {
        return Err(format!(
            "{key}={}: larger than {MAX_PEM_FILE_BYTES} bytes, not a PEM file",
            path.display()
        ));
    }
    std::fs::read(path).map_err(|e| format!("{key}={}: {e}", path.display()))
}

/// Every certificate in the file, in order (a chain: leaf first).
pub(super) fn certs(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{key}={}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{key}={}: no certificate (expected -----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

/// The file's private key (PKCS#8, PKCS#1 RSA or SEC1 EC, unencrypted).
pub(super) fn private_key(key: &str, path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = read(key, path)?;
    if bytes
        .windows(b"ENCRYPTED PRIVATE KEY".len())
        .any(|w| w == b"ENCRYPTED PRIVATE KEY")
    {
        return Err(format!(
            "{key}={}: the key is encrypted; Tern reads unencrypted keys only (decrypt it \
             with `openssl pkey -in FILE -out FILE.plain` and keep that file private)",
            path.display()
        ));
    }
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        format!(
            "{key}={}: no private key ({e}; expected -----BEGIN PRIVATE KEY-----)",
            path.display()
        )
    })
}

/// The trust anchors in a CA file.
pub(super) fn roots(key: &str, path: &Path) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    for c in certs(key, path)? {
        store
            .add(c)
            .map_err(|e| format!("{key}={}: {e}", path.display()))?;
    }
    Ok(store)
}
