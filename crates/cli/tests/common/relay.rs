//! A slow TCP relay, for restores that must take a while (tests/serve_restore.rs,
//! tests/browser.rs).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// A TCP relay on 127.0.0.1 to port `upstream` that holds each piece the client sends for
/// `pause` while `slow` is set: a restore through it takes long enough to be cancelled
/// midway, or watched. Its port.
pub fn slow_relay(upstream: u16, slow: Arc<AtomicBool>, pause: Duration) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { return };
            let Ok(u) = TcpStream::connect(("127.0.0.1", upstream)) else {
                return;
            };
            let (c2, u2) = (c.try_clone().unwrap(), u.try_clone().unwrap());
            let slow = slow.clone();
            std::thread::spawn(move || pipe(c, u, Some((slow, pause))));
            std::thread::spawn(move || pipe(u2, c2, None));
        }
    });
    port
}

fn pipe(mut from: TcpStream, mut to: TcpStream, slow: Option<(Arc<AtomicBool>, Duration)>) {
    let mut buf = [0u8; 2048];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
        if let Some((_, pause)) = slow.as_ref().filter(|(s, _)| s.load(Relaxed)) {
            std::thread::sleep(*pause);
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}
