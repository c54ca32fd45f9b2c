//! `tls`: sync sends to one Tern broker in `tls.server.mode=permissive`, in plaintext and
//! over TLS, alternated A/B per load level in the same run: what TLS costs a sender.
//!
//! The certificates are made with the `openssl` commands docs/tls.md gives (a CA, and a
//! server certificate for 127.0.0.1 it signed), so the bench also checks those.

use std::path::Path;
use std::process::Command;

use tern_client::{ClientTls, ClientTlsSettings};
use tern_shell::runtime::block_on;

use crate::load::{self, Load, Mode};
use crate::proc::start_tern;
use crate::suite::{SuiteParams, TERN, TOPIC, load_of, log_row, measured, tern_conf};
use crate::table::Measure;

fn openssl(dir: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("running openssl (apt-get install openssl): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// `openssl req` making a new unencrypted P-256 key `key` and, for subject `subj`,
/// `out`: a signing request, or with `-x509` among `extra` a self-signed certificate.
fn new_key(dir: &Path, extra: &[&str], key: &str, out: &str, subj: &str) -> Result<(), String> {
    let args = [
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ][..],
        extra,
        &["-keyout", key, "-out", out, "-subj", subj],
    ]
    .concat();
    openssl(dir, &args)
}

/// `ca.pem`, and `server.pem` + `server.key` for 127.0.0.1 signed by it, in `dir`.
fn make_certs(dir: &Path) -> Result<(), String> {
    new_key(
        dir,
        &["-x509", "-days", "30"],
        "ca.key",
        "ca.pem",
        "/CN=Tern bench CA",
    )?;
    new_key(dir, &[], "server.key", "server.csr", "/CN=tern-broker")?;
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .map_err(|e| e.to_string())?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "30",
            "-extfile",
            "san.ext",
            "-out",
            "server.pem",
        ],
    )
}

/// Runs the scenario: rows `sync plaintext` and `sync TLS` per sender count.
pub fn run(p: &SuiteParams, rows: &mut Vec<Measure>) -> Result<(), String> {
    let dir = p.dir.join("tls");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    make_certs(&dir)?;
    let conf = format!(
        "{}tls.server.mode=permissive\ntls.server.certPath={}\ntls.server.keyPath={}\n",
        tern_conf(p, false),
        dir.join("server.pem").display(),
        dir.join("server.key").display()
    );
    let broker = start_tern(&dir.join("broker"), &conf)?;
    let namesrv = broker.namesrv.clone().unwrap_or_default();
    block_on(load::create_topic(&namesrv, TOPIC))?;
    let tls = ClientTls::new(&ClientTlsSettings::trusting(dir.join("ca.pem")))?;
    eprintln!("tls: sync ASYNC_FLUSH, plaintext and TLS to one permissive broker");
    for (i, &n) in p.producers.iter().enumerate() {
        let mut order = [None, tls.clone()];
        if i % 2 == 1 {
            order.reverse();
        }
        for t in order {
            let case = if t.is_some() {
                "sync TLS"
            } else {
                "sync plaintext"
            };
            let load = Load {
                tls: t,
                ..load_of(p, namesrv.clone(), Mode::Sync, n)
            };
            let r = block_on(load::run(&load)).map_err(|e| format!("tls {case}: {e}"))?;
            let m = measured("tls", TERN, case, n, p.body, &r);
            log_row(&m);
            rows.push(m);
        }
    }
    Ok(())
}
