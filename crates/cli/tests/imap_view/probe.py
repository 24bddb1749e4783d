"""Probes `mailvault serve --imap` with Python's imaplib and a raw socket; prints what it
saw as one JSON object for crates/cli/tests/imap_view.rs to check.

Usage: probe.py PORT PASSWORD_FILE ACCOUNT
"""
import base64
import imaplib
import json
import re
import socket
import sys

port, pwfile, account = int(sys.argv[1]), sys.argv[2], sys.argv[3]
token = open(pwfile).read().strip()
user = '"%s*admin"' % account  # `*` is not an atom character: quoted
out = {}


def conn():
    return imaplib.IMAP4("127.0.0.1", port)


def text(typ, data):
    return typ + " " + b" ".join(d for d in data if isinstance(d, bytes)).decode("latin-1")


c = conn()
out["capability"] = list(c.capabilities)
try:
    c.login(user, "wrong-token-0123456789")
    out["wrong_login"] = "OK"
except imaplib.IMAP4.error as e:
    out["wrong_login"] = str(e)
c.login(user, token)
typ, data = c.list()
out["list"] = [d.decode("latin-1") for d in data]
names = []
for d in data:
    m = re.match(rb'\((.*?)\) "/" (.*)$', d)
    attrs, name = m.group(1).decode(), m.group(2).decode()
    if name.startswith('"'):
        name = name[1:-1]
    names.append([name, attrs])
out["names"] = names
out["lsub"] = len(c.lsub()[1])

# SELECT answers [READ-ONLY] (imaplib raises for a read-only SELECT unless asked for it).
try:
    c.select("INBOX")
    out["select_readonly"] = False
except imaplib.IMAP4.readonly:
    out["select_readonly"] = True
typ, data = c.select("INBOX", readonly=True)
out["examine"] = typ


def refused(f):
    try:
        typ, data = f()
        return text(typ, data)
    except imaplib.IMAP4.error as e:
        return "NO " + str(e)


out["refusals"] = {
    "STORE": refused(lambda: c.store("1", "+FLAGS", "\\Deleted")),
    "COPY": refused(lambda: c.copy("1", "Archive")),
    "EXPUNGE": refused(lambda: c.expunge()),
    "APPEND": refused(lambda: c.append("INBOX", None, None, b"Subject: x\r\n\r\ny\r\n")),
    "CREATE": refused(lambda: c.create("New")),
    "DELETE": refused(lambda: c.delete("Archive")),
    "RENAME": refused(lambda: c.rename("Archive", "Other")),
    "SUBSCRIBE": refused(lambda: c.subscribe("Archive")),
}
c.select("INBOX", readonly=True)
typ, data = c.fetch("1", "(BODY.PEEK[]<0.10>)")
out["partial"] = data[0][1].hex()
typ, data = c.fetch("1", "(BODY.PEEK[HEADER.FIELDS (Subject From)])")
out["header_fields"] = data[0][1].hex()
typ, data = c.fetch("1", "(BODY.PEEK[HEADER])")
out["header"] = data[0][1].hex()
typ, data = c.uid("SEARCH", "ALL")
out["search_all"] = data[0].decode()
typ, data = c.uid("SEARCH", "UID", "8:*")
out["search_uids"] = data[0].decode()
typ, data = c.search(None, "UNSEEN")
out["search_unseen"] = data[0].decode()
typ, data = c.search(None, "ALL")
out["search_seqs"] = data[0].decode()
out["envelope"] = refused(lambda: c.fetch("1", "(ENVELOPE)"))
out["fetch_all"] = refused(lambda: c.fetch("1", "ALL"))
out["search_text"] = c.search(None, "TEXT", '"over crlf"')[1][0].decode()
out["search_from"] = c.search(None, "FROM", "CAROL")[1][0].decode()
out["search_subject_or"] = c.search(None, "OR", "SUBJECT", "8BIT", "HEADER", "X-Long", "FOLDED")[1][0].decode()
out["search_body_not"] = c.uid("SEARCH", "NOT", "BODY", "line")[1][0].decode()
out["search_sent"] = c.search(None, "SENTON", "01-Jan-2024", "SENTBEFORE", "02-Jan-2024")[1][0].decode()


def folder(name):
    typ, data = c.select('"%s"' % name, readonly=True)
    if typ != "OK":
        return None
    uidvalidity = c.response("UIDVALIDITY")[1][0].decode()
    msgs = []
    typ, data = c.uid("FETCH", "1:*", "(UID FLAGS INTERNALDATE RFC822.SIZE BODY.PEEK[])")
    for d in data:
        if not isinstance(d, tuple):
            continue
        head, body = d
        uid = int(re.search(rb"UID (\d+)", head).group(1))
        flags = re.search(rb"FLAGS \(([^)]*)\)", head).group(1).decode()
        size = int(re.search(rb"RFC822.SIZE (\d+)", head).group(1))
        date = re.search(rb'INTERNALDATE "([^"]+)"', head).group(1).decode()
        msgs.append([uid, sorted(flags.split()), size, len(body), body.hex(), date])
    return {"uidvalidity": uidvalidity, "messages": msgs}


c.select("Archive", readonly=True)
typ, data = c.fetch("2", "(BODYSTRUCTURE)")
out["bodystructure"] = data[0].decode() if isinstance(data[0], bytes) else repr(data)
parts = {}
for sec in ["1", "2.MIME", "3", "3.HEADER", "3.1", "3.TEXT", "4", "1.HEADER"]:
    typ, data = c.fetch("2", "(BODY.PEEK[%s])" % sec)
    d = data[0]
    parts[sec] = d[1].hex() if isinstance(d, tuple) else typ + " " + repr(data)
out["parts"] = parts
out["folders"] = {n: folder(n) for n, attrs in names if "\\Noselect" not in attrs}
out["status"] = text(*c.status("Archive/2023", "(MESSAGES UIDNEXT UIDVALIDITY UNSEEN)"))
out["hostile"] = {}
for name in ["../bob/INBOX", "BobOnly", "bob@example.org/INBOX", "*", "%", "Snapshots",
             "../../INBOX", "INBOX/..", "Snapshots/../BobOnly", "Archive\r\nX"]:
    try:
        typ, data = c.select('"%s"' % name.replace("\r\n", ""), readonly=True)
        out["hostile"][name] = typ
    except imaplib.IMAP4.error as e:
        out["hostile"][name] = "BAD " + str(e)
out["list_bob"] = len([d for d in c.list('""', "*Bob*")[1] if d])
for cmd in ["NOOP", "CHECK", "CLOSE"]:
    c.select("INBOX", readonly=True)
    out[cmd] = c._simple_command(cmd)[0]
out["namespace"] = text(*c.namespace())
c.logout()

# AUTHENTICATE PLAIN, with the data after a continuation.
c = conn()
plain = ("\0%s*admin\0%s" % (account, token)).encode()
typ, data = c.authenticate("PLAIN", lambda _: plain)
out["authenticate"] = typ
c.logout()

# IDLE (answered, never notifying), then DONE; ENABLE; an unknown command.
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")
f.readline()
s.sendall(b'a LOGIN "%s*admin" "%s"\r\n' % (account.encode(), token.encode()))
line = f.readline()
while not line.startswith(b"a "):
    line = f.readline()
out["raw_login"] = line.decode().strip()
s.sendall(b"b IDLE\r\n")
out["idle_continue"] = f.readline().decode().strip()
s.sendall(b"DONE\r\n")
out["idle_done"] = f.readline().decode().strip()
s.sendall(b"c ENABLE CONDSTORE\r\n")
lines = [f.readline().decode().strip(), f.readline().decode().strip()]
out["enable"] = lines
s.sendall(b"d FROB x\r\n")
out["unknown"] = f.readline().decode().strip()
s.sendall(b"e LOGOUT\r\n")
rest = f.read().decode()
out["logout"] = rest.strip().splitlines()
s.close()

# Hostile input: every line answered, none hangs the session.
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(10)
f = s.makefile("rb")
f.readline()


def answer(data, tag):
    s.sendall(data)
    lines = []
    while True:
        line = f.readline().decode("latin-1").strip()
        lines.append(line)
        if line.startswith(tag + " ") or line.startswith("+") or not line:
            return lines


out["garbage"] = answer(b"\x00\x01\xff garbage\r\nz1 NOOP\r\n", "z1")
out["long_literal"] = answer(b"z2 SELECT {100000}\r\n", "z2")
out["auth_bad_base64"] = answer(b"z3 AUTHENTICATE PLAIN\r\n", "z3")
out["auth_bad_base64"] += answer(b"!!not base64!!\r\n", "z3")
out["after"] = answer(b"z4 NOOP\r\n", "z4")
# RFC 7888's LITERAL-: literals sent without waiting (`{n+}`), taken without a "+"; one
# too long is read whole, dropped and answered BAD, and what follows it is a command again.
u, t = f'"{account}*admin"'.encode(), token.encode()
out["nonsync"] = answer(b"z5 LOGIN {%d+}\r\n%s {%d+}\r\n%s\r\n" % (len(u) - 2, u[1:-1], len(t), t), "z5")
out["nonsync_long"] = answer(b"z6 EXAMINE {70000+}\r\n" + b"a" * 70000 + b"\r\n", "z6")
out["nonsync_after"] = answer(b"z7 NOOP\r\n", "z7")
s.close()

print(json.dumps(out))
