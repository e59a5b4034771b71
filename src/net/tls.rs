//! The cluster's certificates and the TLS configurations built from them.
//!
//! A cluster has one CA. [`init`] creates it and one certificate per role
//! ([`CertRole`]); [`load`] reads one role's [`Identity`] back. The role is
//! carried as a DNS subject alternative name, `<role>.ccroute`, so that:
//!
//! - a client verifies the server as `scheduler.ccroute` whatever address it
//!   dialled, and
//! - the scheduler learns a client's role from its verified certificate
//!   ([`peer_role`]) and compares it with the role the client claims in its
//!   hello ([`verify_role`]).
//!
//! Extended key usages keep the two sides apart as well: only the scheduler's
//! certificate may serve, only the others may authenticate a client.
//!
//! Left out: revocation, rotation and intermediate CAs — a compromised
//! cluster runs [`init`] again with `force` and redistributes the files.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ccroute_wire::{Hello, Refusal, RefusalKind, Role, PROTOCOL_VERSION};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::client::verify_server_name;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::RootCertStore;
use thiserror::Error;

use super::NetError;

/// The ALPN protocol every ccroute connection negotiates.
pub const ALPN: &[u8] = b"ccroute/1";

/// The name a client checks the scheduler's certificate against.
pub const SCHEDULER_NAME: &str = "scheduler.ccroute";

/// How long certificates from [`init`] are valid.
const VALIDITY_YEARS: i32 = 10;

/// How far before "now" certificates from [`init`] become valid, so that a
/// host whose clock runs behind the CA's still accepts them.
const SKEW_TOLERANCE: Duration = Duration::from_secs(2 * 24 * 3600);

/// The role a certificate is issued for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CertRole {
    /// The one server of the cluster.
    Scheduler,
    /// Runs compiles.
    Agent,
    /// Sends compiles.
    Consumerd,
    /// Asks for status.
    Admin,
}

impl CertRole {
    /// Every role, the scheduler first.
    pub const ALL: [CertRole; 4] = [CertRole::Scheduler, CertRole::Agent, CertRole::Consumerd, CertRole::Admin];

    /// The file stem and the first label of the role's DNS name.
    pub fn name(self) -> &'static str {
        match self {
            CertRole::Scheduler => "scheduler",
            CertRole::Agent => "agent",
            CertRole::Consumerd => "consumerd",
            CertRole::Admin => "admin",
        }
    }

    /// The DNS subject alternative name that carries the role.
    pub fn dns_name(self) -> &'static str {
        match self {
            CertRole::Scheduler => SCHEDULER_NAME,
            CertRole::Agent => "agent.ccroute",
            CertRole::Consumerd => "consumerd.ccroute",
            CertRole::Admin => "admin.ccroute",
        }
    }

    /// The certificate role of a connecting peer's role.
    pub fn of_client(role: Role) -> CertRole {
        match role {
            Role::Agent => CertRole::Agent,
            Role::Consumerd => CertRole::Consumerd,
            Role::Admin => CertRole::Admin,
        }
    }

    /// The connecting role this certificate is for; `None` for the scheduler.
    pub fn client_role(self) -> Option<Role> {
        match self {
            CertRole::Scheduler => None,
            CertRole::Agent => Some(Role::Agent),
            CertRole::Consumerd => Some(Role::Consumerd),
            CertRole::Admin => Some(Role::Admin),
        }
    }
}

impl fmt::Display for CertRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why certificates could not be created, read or turned into a TLS
/// configuration.
#[derive(Debug, Error)]
pub enum TlsError {
    /// [`init`] without `force` found an existing file.
    #[error("{} already exists; refusing to overwrite the cluster's certificates without force", path.display())]
    Exists {
        /// The first existing file.
        path: PathBuf,
    },
    /// A file or directory could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// What was being written.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A file [`load`] needs does not exist.
    #[error("{} does not exist; create the cluster's certificates with `ccroute certs init DIR` and give that DIR as --tls-dir", path.display())]
    Missing {
        /// The missing file.
        path: PathBuf,
    },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A file holds no usable PEM item of the kind expected.
    #[error("{} holds no {what}: {detail}", path.display())]
    BadPem {
        /// The file.
        path: PathBuf,
        /// "certificate" or "private key".
        what: &'static str,
        /// The parser's description.
        detail: String,
    },
    /// rcgen could not generate a key or certificate.
    #[error("cannot generate the {what}: {source}")]
    Generate {
        /// Which item.
        what: String,
        /// rcgen's error.
        #[source]
        source: rcgen::Error,
    },
    /// rustls refused the certificate or key.
    #[error("invalid tls configuration: {0}")]
    Config(#[from] rustls::Error),
    /// The client verifier could not be built from the CA.
    #[error("cannot verify clients against the cluster CA: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// quinn refused the TLS configuration.
    #[error("the tls configuration has no cipher suite quic can use")]
    NoQuicCipherSuite,
}

/// One role's certificate and key, and the cluster CA that checks its peers.
pub struct Identity {
    role: CertRole,
    ca: CertificateDer<'static>,
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

impl Identity {
    /// The role the certificate is issued for.
    pub fn role(&self) -> CertRole {
        self.role
    }

    /// A secret derived from the private key alone: the same for every
    /// process that loads this identity, and telling nothing about the key.
    /// The scheduler keys its QUIC stateless resets with it, so that a
    /// scheduler restarted with the same certificate can tell its peers at
    /// once that their connections are gone.
    pub fn derived_secret(&self, purpose: &str) -> [u8; 32] {
        blake3::derive_key(purpose, self.key.secret_der())
    }
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity { role: self.role, ca: self.ca.clone(), cert: self.cert.clone(), key: self.key.clone_key() }
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key stays out of logs.
        f.debug_struct("Identity").field("role", &self.role).finish_non_exhaustive()
    }
}

/// What the files [`load`] reads for `role` in `dir` look like now (each
/// one's length and modification time): when it changes, they were
/// replaced. Files that are missing count as such.
pub fn files_stamp(dir: &Path, role: CertRole) -> Vec<Option<(u64, std::time::SystemTime)>> {
    let (cert, key) = role_files(dir, role);
    [dir.join("ca.pem"), cert, key]
        .iter()
        .map(|p| std::fs::metadata(p).ok().and_then(|m| Some((m.len(), m.modified().ok()?))))
        .collect()
}

/// The file names [`init`] writes for a role: certificate, key.
fn role_files(dir: &Path, role: CertRole) -> (PathBuf, PathBuf) {
    (dir.join(format!("{}.pem", role.name())), dir.join(format!("{}.key", role.name())))
}

/// Creates the cluster CA (`ca.pem`, `ca.key`) and a certificate and key per
/// role (`<role>.pem`, `<role>.key`) in `dir`. Keys are written mode 0600 and
/// `dir` is set to mode 0700.
///
/// # Errors
/// [`TlsError::Exists`] when any of the files exists and `force` is false;
/// an I/O or generation error otherwise.
pub fn init(dir: &Path, force: bool) -> Result<(), TlsError> {
    let mut files = vec![dir.join("ca.pem"), dir.join("ca.key")];
    for role in CertRole::ALL {
        let (cert, key) = role_files(dir, role);
        files.extend([cert, key]);
    }
    if !force {
        if let Some(path) = files.iter().find(|p| p.exists()) {
            return Err(TlsError::Exists { path: path.clone() });
        }
    }
    fs::create_dir_all(dir).map_err(|source| TlsError::Write { path: dir.to_path_buf(), source })?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|source| TlsError::Write { path: dir.to_path_buf(), source })?;

    let generate = |what: &str, source| TlsError::Generate { what: what.to_string(), source };
    let now = SystemTime::now();

    let ca_key = KeyPair::generate().map_err(|e| generate("ca key", e))?;
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = rcgen::DistinguishedName::new();
    // A distinct name per cluster, so that a certificate from another
    // cluster's CA is reported as "unknown issuer", not as a bad signature.
    let fingerprint = blake3::hash(ca_key.public_key_raw());
    let tag: String = fingerprint.as_bytes()[..6].iter().map(|b| format!("{b:02x}")).collect();
    ca_params.distinguished_name.push(DnType::CommonName, format!("ccroute cluster CA {tag}"));
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    set_validity(&mut ca_params, now);
    let ca_pem_key = ca_key.serialize_pem();
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(|e| generate("ca certificate", e))?;
    write_file(&dir.join("ca.pem"), ca.pem().as_bytes(), 0o644)?;
    write_file(&dir.join("ca.key"), ca_pem_key.as_bytes(), 0o600)?;

    for role in CertRole::ALL {
        let key = KeyPair::generate().map_err(|e| generate(&format!("{role} key"), e))?;
        let mut params = CertificateParams::new(vec![role.dns_name().to_string()])
            .map_err(|e| generate(&format!("{role} certificate"), e))?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, format!("ccroute {role}"));
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![match role {
            CertRole::Scheduler => ExtendedKeyUsagePurpose::ServerAuth,
            _ => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        params.use_authority_key_identifier_extension = true;
        set_validity(&mut params, now);
        let cert = params.signed_by(&key, &ca).map_err(|e| generate(&format!("{role} certificate"), e))?;
        let (cert_path, key_path) = role_files(dir, role);
        write_file(&cert_path, cert.pem().as_bytes(), 0o644)?;
        write_file(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    }
    Ok(())
}

/// Writes `bytes` to `path` with `mode`, through a temporary file renamed in
/// place so that a crash never leaves half a key.
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    let err = |source| TlsError::Write { path: path.to_path_buf(), source };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let _ = fs::remove_file(&tmp);
    let mut file = fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp).map_err(err)?;
    file.write_all(bytes).map_err(err)?;
    file.sync_all().map_err(err)?;
    drop(file);
    fs::rename(&tmp, path).map_err(err)
}

/// Sets the validity window of a certificate issued at `now`: from
/// [`SKEW_TOLERANCE`] before it (rounded down to midnight) to
/// [`VALIDITY_YEARS`] after.
fn set_validity(params: &mut CertificateParams, now: SystemTime) {
    let secs = now.duration_since(UNIX_EPOCH).unwrap_or_default().saturating_sub(SKEW_TOLERANCE).as_secs();
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    // Day 28 exists in every month: no 29 February ten years on.
    params.not_after = rcgen::date_time_ymd(y + VALIDITY_YEARS, m, d.min(28));
}

/// Year, month and day of the `days`-th day after 1970-01-01 (proleptic
/// Gregorian; H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i32, u8, u8) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y as i32, m as u8, d as u8)
}

/// Reads `role`'s certificate and key and the cluster CA from `dir`.
///
/// # Errors
/// [`TlsError::Missing`], [`TlsError::Read`] or [`TlsError::BadPem`] naming
/// the file.
pub fn load(dir: &Path, role: CertRole) -> Result<Identity, TlsError> {
    let (cert_path, key_path) = role_files(dir, role);
    let ca = read_cert(&dir.join("ca.pem"))?;
    let cert = read_cert(&cert_path)?;
    let key_pem = read(&key_path)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::BadPem {
        path: key_path.clone(),
        what: "private key",
        detail: e.to_string(),
    })?;
    Ok(Identity { role, ca, cert, key })
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    fs::read(path).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => TlsError::Missing { path: path.to_path_buf() },
        _ => TlsError::Read { path: path.to_path_buf(), source },
    })
}

fn read_cert(path: &Path) -> Result<CertificateDer<'static>, TlsError> {
    let pem = read(path)?;
    CertificateDer::from_pem_slice(&pem).map_err(|e| TlsError::BadPem {
        path: path.to_path_buf(),
        what: "certificate",
        detail: e.to_string(),
    })
}

fn provider() -> Arc<CryptoProvider> {
    // Explicit, so that another crate enabling a second provider cannot make
    // rustls's process-wide default ambiguous.
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(identity: &Identity) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    roots.add(identity.ca.clone())?;
    Ok(roots)
}

/// A TLS 1.3 server configuration that presents `identity` and requires a
/// client certificate chained to the cluster CA.
///
/// # Errors
/// [`TlsError`] when rustls refuses the CA, certificate or key.
pub fn server_config(identity: &Identity) -> Result<rustls::ServerConfig, TlsError> {
    let provider = provider();
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots(identity)?), provider.clone()).build()?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![identity.cert.clone()], identity.key.clone_key())?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// A TLS 1.3 client configuration that trusts only the cluster CA and
/// presents `identity`. The server name to check is given per connection
/// ([`SCHEDULER_NAME`]).
///
/// # Errors
/// [`TlsError`] when rustls refuses the CA, certificate or key.
pub fn client_config(identity: &Identity) -> Result<rustls::ClientConfig, TlsError> {
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots(identity)?)
        .with_client_auth_cert(vec![identity.cert.clone()], identity.key.clone_key())?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// The role a connected client's certificate is issued for.
///
/// The certificate was chained to the cluster CA during the handshake; this
/// reads which role name it is valid for.
///
/// # Errors
/// [`NetError::NoRole`] when the peer presented no certificate or one valid
/// for no client role.
pub fn peer_role(conn: &quinn::Connection) -> Result<Role, NetError> {
    let peer = conn.remote_address();
    let certs = conn
        .peer_identity()
        .and_then(|id| id.downcast::<Vec<CertificateDer<'static>>>().ok())
        .ok_or(NetError::NoRole { peer })?;
    let leaf = certs.first().ok_or(NetError::NoRole { peer })?;
    cert_client_role(leaf).ok_or(NetError::NoRole { peer })
}

fn cert_client_role(leaf: &CertificateDer<'_>) -> Option<Role> {
    let parsed = ParsedCertificate::try_from(leaf).ok()?;
    [Role::Agent, Role::Consumerd, Role::Admin].into_iter().find(|role| {
        ServerName::try_from(CertRole::of_client(*role).dns_name())
            .is_ok_and(|name| verify_server_name(&parsed, &name).is_ok())
    })
}

/// Checks the role a hello claims against the peer's certificate.
///
/// # Errors
/// A [`RefusalKind::WrongRole`] refusal to send back when they differ or
/// the certificate names no client role.
pub fn verify_role(conn: &quinn::Connection, hello: &Hello) -> Result<Role, Refusal> {
    let claimed = hello.body.role;
    let refusal = |reason: String| Refusal {
        kind: RefusalKind::WrongRole,
        ours: PROTOCOL_VERSION,
        theirs: hello.version,
        reason,
    };
    match peer_role(conn) {
        Ok(certified) if certified == claimed => Ok(certified),
        Ok(certified) => {
            Err(refusal(format!("the hello says {claimed} but the certificate is issued for {certified}")))
        }
        Err(_) => Err(refusal(format!("the hello says {claimed} but the certificate names no client role"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn validity_starts_before_now_and_lasts_ten_years() {
        // 2024-03-01T12:00:00Z
        let now = UNIX_EPOCH + Duration::from_secs(1_709_294_400);
        let mut params = CertificateParams::default();
        set_validity(&mut params, now);
        assert_eq!(params.not_before, rcgen::date_time_ymd(2024, 2, 28));
        assert_eq!(params.not_after, rcgen::date_time_ymd(2034, 2, 28));
    }

    #[test]
    fn init_writes_every_file_with_private_keys() {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        init(&certs, false).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&certs), 0o700);
        for stem in ["ca", "scheduler", "agent", "consumerd", "admin"] {
            assert!(fs::read_to_string(certs.join(format!("{stem}.pem"))).unwrap().contains("BEGIN CERTIFICATE"));
            assert_eq!(mode(&certs.join(format!("{stem}.key"))), 0o600, "{stem}.key");
        }
        for role in CertRole::ALL {
            let id = load(&certs, role).unwrap();
            assert_eq!(id.role(), role);
            assert_eq!(cert_client_role(&id.cert), role.client_role(), "{role}");
            // Every certificate chains to the CA: a server config accepts it.
            server_config(&id).unwrap();
            client_config(&id).unwrap();
        }
    }

    #[test]
    fn init_refuses_to_overwrite_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        init(dir.path(), false).unwrap();
        let before = fs::read(dir.path().join("ca.pem")).unwrap();
        let err = init(dir.path(), false).unwrap_err();
        assert!(matches!(&err, TlsError::Exists { path } if path.ends_with("ca.pem")), "{err}");
        assert_eq!(fs::read(dir.path().join("ca.pem")).unwrap(), before);
        init(dir.path(), true).unwrap();
        assert_ne!(fs::read(dir.path().join("ca.pem")).unwrap(), before, "force makes a new CA");
        assert_eq!(fs::metadata(dir.path().join("ca.key")).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn load_names_the_missing_or_bad_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = load(dir.path(), CertRole::Agent).unwrap_err();
        assert!(matches!(&err, TlsError::Missing { path } if path.ends_with("ca.pem")), "{err}");
        assert!(err.to_string().contains("ca.pem does not exist"), "{err}");

        init(dir.path(), false).unwrap();
        fs::remove_file(dir.path().join("agent.key")).unwrap();
        let err = load(dir.path(), CertRole::Agent).unwrap_err();
        assert!(err.to_string().contains("agent.key does not exist"), "{err}");

        fs::write(dir.path().join("consumerd.pem"), "not a certificate").unwrap();
        let err = load(dir.path(), CertRole::Consumerd).unwrap_err();
        assert!(matches!(err, TlsError::BadPem { what: "certificate", .. }), "{err}");
        assert!(err.to_string().contains("consumerd.pem holds no certificate"), "{err}");
    }
}
