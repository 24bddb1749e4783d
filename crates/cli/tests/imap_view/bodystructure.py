"""BODYSTRUCTURE, BODY and ENVELOPE judged against Dovecot: the same messages APPENDed to
a real Dovecot's INBOX (in the order mailvault's INBOX has them), then each message's
BODYSTRUCTURE, BODY and ENVELOPE fetched from both servers with Python's imaplib. Prints
[[item, mailvault's answer, Dovecot's], ...] as JSON for crates/cli/tests/imap_view.rs.

The answers are compared as the strings the servers sent (literals inline), with one
normalisation: the type of a text part and the type and subtype of a message/rfc822
part in lower case. Dovecot writes them as the message does (`"TEXT" "Plain"`); the
view's IMAP codec (imap-codec) always writes `"TEXT"` and `"MESSAGE" "RFC822"`, and MIME
types are case-insensitive. Everything else, subtypes and parameters included, is
compared as sent.

Usage: bodystructure.py OUR_PORT PASSWORD_FILE ACCOUNT DOVECOT_PORT DOVECOT_PASSWORD MSG...
"""
import imaplib
import json
import re
import sys

port, pwfile, account = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dport, dpass, files = int(sys.argv[4]), sys.argv[5], sys.argv[6:]
token = open(pwfile).read().strip()

ours = imaplib.IMAP4("127.0.0.1", port)
ours.login('"%s*admin"' % account, token)
ours.select("INBOX", readonly=True)
dove = imaplib.IMAP4("127.0.0.1", dport)
dove.login(account, dpass)
dove.select("INBOX")
for f in files:
    dove.append("INBOX", None, None, open(f, "rb").read())
dove.select("INBOX", readonly=True)

TYPES = re.compile(rb'\("(text)" |\("(message)" "(rfc822)" ', re.IGNORECASE)


def fetch(c, seq, item):
    typ, data = c.fetch(str(seq), "(%s)" % item)
    if typ != "OK":
        return "%s %r" % (typ, data)
    raw = b"".join(b"".join(d) if isinstance(d, tuple) else d for d in data if d is not None)
    return TYPES.sub(lambda m: m.group(0).lower(), raw).decode("utf-8", "replace")


out = []
for i in range(1, len(files) + 1):
    for item in ("BODYSTRUCTURE", "BODY", "ENVELOPE"):
        out.append([item, fetch(ours, i, item), fetch(dove, i, item)])
ours.logout()
dove.logout()
print(json.dumps(out))
