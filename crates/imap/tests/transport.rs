//! Transport failures without any server logic: refused connections, a peer
//! that never speaks, a peer that is not IMAP. (No IMAP behaviour is
//! simulated here; protocol behaviour is tested against Dovecot.)

use std::io::Write;
use std::net::TcpListener;
use std::time::Duration;

use mailvault_imap::{Client, ClientOptions, Endpoint, Error, Session};

fn options(port: u16) -> ClientOptions {
    let mut o =
        ClientOptions::new(Endpoint::parse(&format!("imap://127.0.0.1:{port}")).expect("url"));
    o.io_timeout = Duration::from_millis(300);
    o.connect_timeout = Duration::from_secs(2);
    o
}

#[test]
fn sessions_move_between_threads_and_clients_are_shared() {
    fn send<T: Send>() {}
    fn sync<T: Send + Sync + Clone>() {}
    send::<Session>();
    sync::<Client>();
    send::<Error>();
}

#[test]
fn connection_refused_is_transient() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let err = Client::new(options(port))
        .expect("client")
        .connect()
        .expect_err("refused");
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(err.is_transient());
    assert!(err.to_string().contains(&format!("127.0.0.1:{port}")));
}

#[test]
fn silent_server_times_out() {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().expect("accept");
        std::thread::sleep(Duration::from_secs(1));
        drop(s);
    });
    let err = Client::new(options(port))
        .expect("client")
        .connect()
        .expect_err("timeout");
    assert!(err.is_timeout(), "{err:?}");
    assert!(err.is_transient() && err.is_connection_lost());
    t.join().expect("thread");
}

#[test]
fn non_imap_peer_is_a_protocol_error() {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2\r\n");
        std::thread::sleep(Duration::from_millis(500));
    });
    let err = Client::new(options(port))
        .expect("client")
        .connect()
        .expect_err("not imap");
    assert!(matches!(err, Error::Protocol { .. }), "{err:?}");
    assert!(!err.is_transient());
    t.join().expect("thread");
}
