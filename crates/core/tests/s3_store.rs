//! The S3 store on a real MinIO (started by `mailvault_core::testing::minio`): the store
//! conformance suite, a repository under a key prefix beside other keys, and what each
//! failure of the service becomes (through the fault proxy, or with wrong settings).
#![allow(clippy::unwrap_used)]

use mailvault_core::error::BackendKind;
use mailvault_core::store::{conformance, Backend, S3Store, Store};
use mailvault_core::testing::fault_proxy::{Fault, FaultProxy};
use mailvault_core::testing::minio::Minio;
use mailvault_core::Error;

fn kind(e: &Error) -> Option<BackendKind> {
    match e {
        Error::Backend { kind, .. } => Some(*kind),
        _ => None,
    }
}

#[test]
fn s3_store_passes_the_conformance_suite() {
    let m = Minio::shared();
    let store = m.store(&m.bucket("conformance"), "").unwrap();
    conformance::run(&store);
}

/// A repository under a prefix sees only its own keys: not the bucket's other keys, not
/// those of a sibling prefix that starts with the same characters.
#[test]
fn s3_store_under_a_prefix_sees_only_its_keys() {
    let m = Minio::shared();
    let bucket = m.bucket("prefix");
    let root = m.store(&bucket, "").unwrap();
    for k in [
        "config",
        "data/ab/outside",
        "hosts/a2/config",
        "hosts/a2/data/x",
    ] {
        root.put(k, b"not ours").unwrap();
    }
    let store = m.store(&bucket, "hosts/a").unwrap();
    assert_eq!(
        store.location(),
        format!("s3:{}/{bucket}/hosts/a", m.endpoint())
    );
    conformance::run(&store);
    assert!(root
        .list("")
        .unwrap()
        .iter()
        .any(|o| o.path == "hosts/a/config"));
    assert_eq!(root.get("config").unwrap(), b"not ours");
}

/// Each failure a service has, injected by the proxy, is a transient error naming the
/// repository; a put whose answer was lost was stored all the same.
#[test]
fn injected_faults_are_transient_errors() {
    let m = Minio::shared();
    let bucket = m.bucket("faults");
    let direct = m.store(&bucket, "").unwrap();
    direct.put("snapshots/one", b"snapshot").unwrap();
    let proxy = FaultProxy::start(&m.address()).unwrap();
    let store = S3Store::new(m.options_at(&proxy.endpoint(), &bucket, "")).unwrap();
    assert_eq!(store.get("snapshots/one").unwrap(), b"snapshot");
    assert_eq!(proxy.stats().get, 1);

    for fault in [Fault::SlowDown, Fault::Drop] {
        proxy.set_faults(1, &[fault]);
        let e = store.get("snapshots/one").unwrap_err();
        assert_eq!(kind(&e), Some(BackendKind::Transient), "{fault:?}: {e}");
        assert!(e.is_transient());
        assert!(e.to_string().contains(&bucket), "{fault:?}: {e}");
        let e = store.put("data/aa/new", b"x").unwrap_err();
        assert!(e.is_transient(), "{fault:?}: {e}");
        let e = store.list("data/").unwrap_err();
        assert!(e.is_transient(), "{fault:?}: {e}");
        assert!(matches!(direct.get("data/aa/new"), Err(Error::NotFound(_))));
    }
    proxy.set_faults(1, &[Fault::LoseAnswer]);
    let e = store.put("data/aa/lost", b"stored").unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert_eq!(direct.get("data/aa/lost").unwrap(), b"stored");
    // Trying the put again finds the object its first attempt stored.
    proxy.set_faults(0, &[]);
    assert!(matches!(
        store.put("data/aa/lost", b"stored"),
        Err(Error::AlreadyExists(_))
    ));
    let s = proxy.stats();
    assert_eq!((s.slow_downs, s.drops, s.lost_answers), (3, 3, 1), "{s:?}");
    assert_eq!(s.requests, 1 + 7 + 1);
}

/// Wrong credentials, a missing bucket and an endpoint nobody listens on are each told
/// apart, and none is transient except the unreachable endpoint (a server may be coming
/// back).
#[test]
fn wrong_settings_are_named() {
    let m = Minio::shared();
    let bucket = m.bucket("settings");
    m.store(&bucket, "").unwrap().put("config", b"c").unwrap();

    let mut o = m.options_at(&m.endpoint(), &bucket, "");
    o.credentials.secret = "not-the-secret".into();
    let e = S3Store::new(o).unwrap().get("config").unwrap_err();
    assert_eq!(kind(&e), Some(BackendKind::Auth), "{e}");
    assert!(!e.is_transient());
    assert!(e.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{e}");

    let missing = m.bucket("missing");
    let store = S3Store::new(m.options_at(&m.endpoint(), &missing, "")).unwrap();
    for e in [
        store.get("config").unwrap_err(),
        store.list("").unwrap_err(),
        store.put("config", b"c").unwrap_err(),
    ] {
        assert_eq!(kind(&e), Some(BackendKind::NoSuchBucket), "{e}");
        assert!(e.to_string().contains(&missing), "{e}");
    }

    // A port with nobody listening (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let store = S3Store::new(m.options_at(&endpoint, &bucket, "")).unwrap();
    let e = store.get("config").unwrap_err();
    assert_eq!(kind(&e), Some(BackendKind::Unreachable), "{e}");
    assert!(e.to_string().contains(&endpoint), "{e}");
}

/// The harness's bucket names are valid and distinct.
#[test]
fn harness_bucket_names_are_valid() {
    let m = Minio::shared();
    let a = m.bucket("Some_Test::name");
    let b = m.bucket("Some_Test::name");
    assert_ne!(a, b);
    for name in [a, b] {
        mailvault_core::store::parse_s3_url(&m.url(&name, "")).unwrap();
    }
}

/// Object Lock on MinIO: a bucket made with it gives every new object the default
/// retention; a locked version cannot be deleted (a plain delete only hides it behind a
/// delete marker); once its retention ends every version goes; a retention is extended
/// and a legal hold keeps an object whatever its date.
#[test]
fn object_lock_keeps_versions_until_their_retention_ends() {
    use mailvault_core::store::{LockMode, LockPolicy, ObjectLock};
    let m = Minio::shared();
    let policy = LockPolicy {
        mode: LockMode::Governance,
        days: 1,
    };
    let store = m.locked_store(&m.bucket("locked"), policy).unwrap();
    assert_eq!(store.policy().unwrap(), Some(policy));
    let plain = m.store(&m.bucket("unlocked"), "").unwrap();
    assert_eq!(plain.policy().unwrap(), None);

    let now = jiff::Timestamp::now();
    store.put("data/ab/ab01", b"pack").unwrap();
    let r = store.retention("data/ab/ab01", None).unwrap();
    assert_eq!(r.mode, Some(LockMode::Governance));
    let until = r.until.expect("the default retention");
    assert!(
        until > now + jiff::SignedDuration::from_hours(23),
        "{until}"
    );
    assert!(!r.legal_hold);
    let versions = store.versions_by_path("data/").unwrap();
    assert_eq!(versions.len(), 1);
    let v = &versions[0].1[0];
    assert!(v.latest && !v.marker && v.size == 4);
    assert!(v.modified.unwrap() >= now - jiff::SignedDuration::from_secs(60));

    // A locked version cannot be removed (MinIO: 400 "Object is WORM protected"; AWS:
    // 403); a plain delete only hides an object behind a delete marker.
    let e = store.remove_versions("data/ab/ab01").unwrap_err();
    assert!(e.to_string().contains("deleting version"), "{e}");
    assert_eq!(store.list("data/").unwrap().len(), 1);
    store.put("data/ef/ef01", b"pack 3").unwrap();
    store.delete("data/ef/ef01").unwrap();
    assert_eq!(store.list("data/").unwrap().len(), 1);

    // Extended, then shortened (governance, bypassed: the test's way to let it end).
    store.put("data/cd/cd01", b"pack 2").unwrap();
    let later = now + jiff::SignedDuration::from_hours(24 * 3);
    store
        .extend("data/cd/cd01", LockMode::Governance, later)
        .unwrap();
    let r = store.retention("data/cd/cd01", None).unwrap();
    assert!(r.until.unwrap() >= later - jiff::SignedDuration::from_secs(1));
    store.legal_hold("data/cd/cd01", true).unwrap();
    assert!(store.retention("data/cd/cd01", None).unwrap().legal_hold);
    for p in ["data/ab/ab01", "data/cd/cd01"] {
        store
            .shorten_retention(
                p,
                None,
                jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1),
            )
            .unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(2100));
    store.remove_versions("data/ab/ab01").unwrap();
    assert!(store.remove_versions("data/cd/cd01").is_err(), "held");
    store.legal_hold("data/cd/cd01", false).unwrap();
    store.remove_versions("data/cd/cd01").unwrap();
    assert!(store.list("").unwrap().is_empty());
    assert!(matches!(
        store.retention("data/cd/cd01", None),
        Err(Error::NotFound(_))
    ));
}
