//! Test certificates made with rcgen: a CA, and server or client certificates it
//! issues (expired ones too), written as PEM files. Shared by the TLS tests of several
//! crates through `#[path]`, so there is one way to make them.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// A certificate authority.
pub struct Ca {
    cert: Certificate,
    key: KeyPair,
}

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate (chain of one).
    pub cert: PathBuf,
    /// Its private key (PKCS#8).
    pub key: PathBuf,
}

impl Ca {
    /// A new CA called `name`.
    pub fn new(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// Writes the CA certificate to `dir/<file>`.
    pub fn write(&self, dir: &Path, file: &str) -> PathBuf {
        let path = dir.join(file);
        std::fs::write(&path, self.cert.pem()).unwrap();
        path
    }

    /// Issues a certificate for `names` (DNS names or IP addresses; also good as a
    /// client certificate) and writes it to `dir/<stem>.pem` and `dir/<stem>.key`.
    /// `expired` makes one whose validity ended in 2001.
    pub fn issue(&self, dir: &Path, stem: &str, names: &[&str], expired: bool) -> Issued {
        let mut p = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
        p.distinguished_name.push(DnType::CommonName, stem);
        if expired {
            p.not_before = rcgen::date_time_ymd(2000, 1, 1);
            p.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        let issued = Issued {
            cert: dir.join(format!("{stem}.pem")),
            key: dir.join(format!("{stem}.key")),
        };
        std::fs::write(&issued.cert, cert.pem()).unwrap();
        std::fs::write(&issued.key, key.serialize_pem()).unwrap();
        issued
    }
}
