"""LIST-EXTENDED (RFC 5258), LIST-STATUS (RFC 5819) and SPECIAL-USE's LIST options (RFC
6154), judged against Dovecot serving the Maildir mailvault backed up: every command asked
of both servers over a plain socket, each answer normalised where the two may rightly
differ. Prints {command: [mailvault's answer, Dovecot's]} as JSON for
crates/cli/tests/imap_view.rs; each answer is the tagged status (OK, NO or BAD) and the
mailboxes listed, sorted by name, each as `name (attributes) extended-data`, its
`* STATUS` items after it.

What is normalised: the order of mailboxes and of attributes; the view's own mailboxes
(`Deleted`, `Snapshots/...`); `\\HasChildren`/`\\HasNoChildren` where the command did not
ask CHILDREN and special-use attributes where it did not ask SPECIAL-USE (the view always
gives both, as Dovecot's plain LIST does; Dovecot's extended LIST only when asked);
`\\Marked`/`\\UnMarked` (Dovecot's, the view has no new mail); quotes in the extended data
(`"CHILDINFO"` or `CHILDINFO`).

Usage: list_extended.py OUR_PORT PASSWORD_FILE ACCOUNT DOVECOT_PORT DOVECOT_PASSWORD
"""
import json
import re
import socket
import sys

port, pwfile, account = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dport, dpass = int(sys.argv[4]), sys.argv[5]
token = open(pwfile).read().strip()

COMMANDS = [
    'LIST "" "*"',
    'LIST () "" "*" RETURN ()',
    'LIST "" ("INBOX" "Arch*" Work/%)',
    'LIST (SUBSCRIBED) "" "*"',
    'list (subscribed) "" "*" return (children)',
    'LIST (SUBSCRIBED RECURSIVEMATCH) "" "%"',
    'LIST (SUBSCRIBED RECURSIVEMATCH) "" "%" RETURN (CHILDREN SPECIAL-USE)',
    'LIST (SUBSCRIBED RECURSIVEMATCH) "" "*"',
    'LIST (SUBSCRIBED RECURSIVEMATCH) "" ("Work" "Archive")',
    'LIST (REMOTE SUBSCRIBED) "" "Work/*"',
    'LIST (SPECIAL-USE) "" "*"',
    'LIST (SPECIAL-USE SUBSCRIBED) "" "*"',
    'LIST (SPECIAL-USE RECURSIVEMATCH) "" "%"',
    'LIST "" "*" RETURN (SPECIAL-USE)',
    'LIST "" "%" RETURN (SUBSCRIBED CHILDREN)',
    'LIST "" "*" RETURN (STATUS (MESSAGES UNSEEN))',
    'LIST (SUBSCRIBED) "" "*" RETURN (STATUS (MESSAGES) SUBSCRIBED)',
    'LIST (SUBSCRIBED RECURSIVEMATCH) "" "%" RETURN (STATUS (MESSAGES))',
    'LIST () "" ""',
    'LIST () "Archive/" "%"',
    'LIST (SUBSCRIBED) "" {6+}\r\nWork/*',
    'LIST (RECURSIVEMATCH) "" "*"',
    'LIST (REMOTE RECURSIVEMATCH) "" "*"',
    'LIST (FOO) "" "*"',
    'LIST "" "*" RETURN (FOO)',
    'LIST (SUBSCRIBED "" "*"',
]
SPECIAL = {"\\sent", "\\drafts", "\\trash", "\\junk", "\\archive", "\\all", "\\flagged"}


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.f = self.s.makefile("rb")
        self.f.readline()
        self.n = 0

    def cmd(self, command):
        self.n += 1
        tag = "t%d" % self.n
        self.s.sendall(("%s %s\r\n" % (tag, command)).encode())
        lines = []
        while True:
            line = self.f.readline().decode("utf-8", "replace").rstrip("\r\n")
            if not line:
                raise SystemExit("connection closed after %r" % lines)
            if line.startswith(tag + " "):
                return line.split(" ")[1], lines
            lines.append(line)


LIST = re.compile(r'^\* LIST \(([^)]*)\) (?:"."|NIL) ("(?:[^"\\]|\\.)*"|\S+)(?: (.*))?$')
STATUS = re.compile(r'^\* STATUS ("(?:[^"\\]|\\.)*"|\S+) \((.*)\)$')


def unquote(s):
    if s.startswith('"'):
        return re.sub(r"\\(.)", r"\1", s[1:-1])
    return s


def normal(command, kind, lines):
    upper = command.upper()
    children = "CHILDREN" in upper
    special = "SPECIAL-USE" in upper
    out, last = [], None
    for line in lines:
        m = LIST.match(line)
        if m:
            attrs = {a.lower() for a in m.group(1).split()}
            attrs -= {"\\marked", "\\unmarked"}
            if not children:
                attrs -= {"\\haschildren", "\\hasnochildren"}
            if not special:
                attrs -= SPECIAL
            name = unquote(m.group(2))
            ext = (m.group(3) or "").replace('"', "").upper()
            last = [name, "%s (%s) %s" % (name, " ".join(sorted(attrs)), ext)]
            out.append(last)
            continue
        m = STATUS.match(line)
        if m and last is not None and unquote(m.group(1)) == last[0]:
            last[1] += " STATUS (%s)" % m.group(2).upper()
            continue
        out.append(["", "unexpected: " + line])
    out = [e for e in out if e[0] != "Deleted" and not e[0].startswith("Snapshots")]
    return [kind] + sorted(e[1] for e in out)


ours = Conn(port)
kind, _ = ours.cmd('LOGIN "%s*admin" "%s"' % (account, token))
assert kind == "OK", kind
dove = Conn(dport)
kind, _ = dove.cmd('LOGIN "%s" "%s"' % (account, dpass))
assert kind == "OK", kind
result = {}
for c in COMMANDS:
    result[c] = [normal(c, *ours.cmd(c)), normal(c, *dove.cmd(c))]
print(json.dumps(result))
