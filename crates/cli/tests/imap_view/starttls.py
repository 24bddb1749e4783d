"""STARTTLS on `mailvault serve --imap` (not a loopback address, with a certificate):
Python's imaplib upgrades and logs in trusting the test certificate alone; a raw socket
checks that logins are refused before TLS and that commands pipelined after STARTTLS in
plain text are not run. Prints one JSON object for crates/cli/tests/imap_view.rs.

Usage: starttls.py PORT CAFILE PASSWORD_FILE ACCOUNT
"""
import base64
import imaplib
import json
import socket
import ssl
import sys

port, cafile, pwfile, account = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
token = open(pwfile).read().strip()
user = '"%s*admin"' % account
ctx = ssl.create_default_context(cafile=cafile)
out = {}


def line(s):
    """One line from a plain socket, read byte by byte (nothing past it is consumed)."""
    b = b""
    while not b.endswith(b"\r\n"):
        c = s.recv(1)
        if not c:
            break
        b += c
    return b.decode("latin-1").rstrip("\r\n")


def until(s, tag, read=line):
    lines = []
    while True:
        l = read(s)
        lines.append(l)
        if l.startswith(tag + " ") or not l:
            return lines


# Logins before TLS are refused (the token is wrong: nothing real crosses in clear text).
s = socket.create_connection(("127.0.0.1", port))
out["greeting"] = line(s)
s.sendall(b'a LOGIN %s "not-the-token"\r\n' % user.encode())
out["login_before_tls"] = until(s, "a")
plain = base64.b64encode(b"\0" + account.encode() + b"*admin\0not-the-token")
s.sendall(b"b AUTHENTICATE PLAIN " + plain + b"\r\n")
out["authenticate_before_tls"] = until(s, "b")
s.close()

# imaplib: STARTTLS, then the capabilities again, a login and a LIST.
m = imaplib.IMAP4("127.0.0.1", port)
out["before"] = list(m.capabilities)
m.starttls(ssl_context=ctx)
out["after"] = list(m.capabilities)
try:
    m._simple_command("STARTTLS")
    out["starttls_again"] = "OK"
except imaplib.IMAP4.error as e:
    out["starttls_again"] = str(e)
typ, _ = m.login(user, token)
out["login"] = typ
typ, boxes = m.list()
out["list"] = [b.decode("latin-1") for b in boxes]
m.logout()

# Commands pipelined after STARTTLS in plain text are dropped, not run after the
# handshake (CVE-2011-0411): the first answer over TLS is to the first command sent
# over TLS.
s = socket.create_connection(("127.0.0.1", port))
line(s)
s.sendall(b"a STARTTLS\r\nb CAPABILITY\r\nc LOGOUT\r\n")
out["starttls"] = until(s, "a")
t = ctx.wrap_socket(s, server_hostname="127.0.0.1")
t.sendall(b"d NOOP\r\n")
r = t.makefile("rb")
out["after_injection"] = until(t, "d", lambda _: r.readline().decode("latin-1").rstrip("\r\n"))
t.close()
print(json.dumps(out))
