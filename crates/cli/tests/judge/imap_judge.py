#!/usr/bin/env python3
"""The judges' independent IMAP client (Python's imaplib, not mailvault's code).

  imap_judge.py populate --port P --account A --password PW [--admin ADMIN]
                         --messages DIR --plan rich|plain --server dovecot|cyrus
      Fills an account over IMAP: nested and non-ASCII folders, special-use folders,
      messages from DIR (sorted *.eml) with every system flag, keywords (including
      $Forwarded), internal dates out of UID order, then copies, moves, flag changes,
      expunges (and messages left \\Deleted), subscriptions (one to a folder that no
      longer exists).
  imap_judge.py record --port P --account A --password PW [--admin ADMIN]
      Prints the account's state as JSON: folders (UTF-8 names), special use,
      subscriptions, UIDVALIDITY, UIDNEXT, and per message UID, flags, keywords,
      INTERNALDATE (Unix seconds), RFC822.SIZE and the SHA-256 of BODY[].
      Mailboxes are EXAMINEd (read-only): mail in new/ stays there and nothing changes.

With --admin, logs in with SASL PLAIN as ADMIN acting for the account (Dovecot's master
user, Cyrus' proxyservers admin).
"""

import argparse
import base64
import datetime
import hashlib
import imaplib
import json
import os
import re
import sys

SYSTEM_FLAGS = {"\\seen", "\\answered", "\\flagged", "\\deleted", "\\draft"}


def mutf7_encode(name):
    out, run = [], []

    def flush():
        if run:
            b = "".join(run).encode("utf-16-be")
            out.append("&" + base64.b64encode(b).decode().rstrip("=").replace("/", ",") + "-")
            run.clear()

    for ch in name:
        if 0x20 <= ord(ch) <= 0x7E:
            flush()
            out.append("&-" if ch == "&" else ch)
        else:
            run.append(ch)
    flush()
    return "".join(out)


def mutf7_decode(name):
    def dec(m):
        s = m.group(1)
        if s == "":
            return "&"
        s = s.replace(",", "/")
        s += "=" * (-len(s) % 4)
        return base64.b64decode(s).decode("utf-16-be")

    return re.sub(r"&([^-]*)-", dec, name)


def quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check(what, typ, data):
    if typ != "OK":
        raise SystemExit(f"imap_judge: {what}: {typ} {data!r}")
    return data


def connect(args):
    m = imaplib.IMAP4("127.0.0.1", args.port, timeout=120)
    if args.admin:
        auth = f"{args.account}\0{args.admin}\0{args.password}".encode()
        check("AUTHENTICATE PLAIN", *m.authenticate("PLAIN", lambda _: auth))
    else:
        check("LOGIN", *m.login(args.account, args.password))
    return m


def command(m, what, *args):
    """A command imaplib has no method for; returns its untagged data by name."""
    m.untagged_responses.clear()
    typ, data = m._simple_command(*args)
    check(what, typ, data)
    return m.untagged_responses


LIST_RE = re.compile(rb'^\((?P<attrs>[^)]*)\) (?P<sep>"(?:[^"\\]|\\.)*"|NIL) (?P<name>.*)$')


def parse_names(lines):
    """(attributes, UTF-8 name) of LIST/LSUB responses (imaplib gives literals as tuples)."""
    out = []
    for item in lines:
        if item is None:
            continue
        if isinstance(item, tuple):  # name sent as a literal
            head, lit = item
            mm = LIST_RE.match(head + b'""')
            name = lit
        else:
            mm = LIST_RE.match(item)
            if not mm:
                raise SystemExit(f"imap_judge: cannot parse {item!r}")
            name = mm.group("name")
            if name.startswith(b'"'):
                name = re.sub(rb"\\(.)", rb"\1", name[1:-1])
        attrs = [a.decode().lower() for a in mm.group("attrs").split()]
        out.append((attrs, mutf7_decode(name.decode())))
    return out


def internaldate_seconds(s):
    return int(datetime.datetime.strptime(s.strip(), "%d-%b-%Y %H:%M:%S %z").timestamp())


FETCH_RE = re.compile(
    rb'UID (?P<uid>\d+)|FLAGS \((?P<flags>[^)]*)\)|INTERNALDATE "(?P<date>[^"]*)"|RFC822\.SIZE (?P<size>\d+)'
)


def record(args):
    m = connect(args)
    folders = []
    listed = parse_names(check("LIST", *m.list('""', "*")))
    special = {}
    try:
        resp = command(m, "LIST RETURN (SPECIAL-USE)", "LIST", '""', "*", "RETURN", "(SPECIAL-USE)")
        for attrs, name in parse_names(resp.get("LIST", [])):
            special[name] = sorted(a for a in attrs if a in
                                   ("\\sent", "\\drafts", "\\trash", "\\junk", "\\archive", "\\all", "\\flagged"))
    except SystemExit:
        pass
    errors = []
    try:
        subs = sorted({name for _, name in parse_names(check("LSUB", *m.lsub('""', "*")))})
    except SystemExit as e:
        subs = []
        errors.append(str(e))
    for attrs, name in sorted(listed, key=lambda x: x[1]):
        if "\\noselect" in attrs or "\\nonexistent" in attrs:
            continue
        m.untagged_responses.clear()
        try:
            check(f"EXAMINE {name}", *m.select(quote(mutf7_encode(name)), readonly=True))
        except SystemExit as e:
            # Recorded, so that the comparison names the folder the server fails.
            folders.append({"name": name, "special_use": special.get(name, []), "uidvalidity": 0,
                            "uidnext": 0, "messages": [], "error": str(e)})
            continue
        uidvalidity = int(m.untagged_responses["UIDVALIDITY"][0])
        uidnext = int(m.untagged_responses["UIDNEXT"][0])
        exists = int(m.untagged_responses["EXISTS"][-1])
        messages = []
        if exists:
            data = check(f"FETCH {name}", *m.uid("FETCH", "1:*", "(UID FLAGS INTERNALDATE RFC822.SIZE)"))
            for line in data:
                if line is None or isinstance(line, tuple):
                    continue
                msg = {}
                for f in FETCH_RE.finditer(line):
                    if f.group("uid"):
                        msg["uid"] = int(f.group("uid"))
                    elif f.group("flags") is not None:
                        fl = f.group("flags").decode().split()
                        msg["flags"] = sorted(x for x in fl if x.lower() in SYSTEM_FLAGS)
                        msg["keywords"] = sorted(x for x in fl if not x.startswith("\\"))
                    elif f.group("date"):
                        msg["internaldate"] = internaldate_seconds(f.group("date").decode())
                    elif f.group("size"):
                        msg["size"] = int(f.group("size"))
                messages.append(msg)
            messages.sort(key=lambda x: x["uid"])
            for msg in messages:
                data = check(f"FETCH BODY {name} {msg['uid']}",
                             *m.uid("FETCH", str(msg["uid"]), "(BODY.PEEK[])"))
                body = next(x[1] for x in data if isinstance(x, tuple))
                msg["sha256"] = hashlib.sha256(body).hexdigest()
            if len(messages) != exists:
                raise SystemExit(f"imap_judge: {name}: EXISTS {exists} but {len(messages)} fetched")
        m.close()  # read-only: expunges nothing
        folders.append({
            "name": name,
            "special_use": special.get(name, []),
            "uidvalidity": uidvalidity,
            "uidnext": uidnext,
            "messages": messages,
        })
    m.logout()
    json.dump({"account": args.account, "folders": folders, "subscriptions": subs, "errors": errors},
              sys.stdout,
              ensure_ascii=False, indent=1, sort_keys=True)
    sys.stdout.write("\n")


# The rich plan: parents are created explicitly, so every level is a real folder.
RICH_FOLDERS = [
    "Archive", "Archive/2024", "Archive/2024/Q1", "Entwürfe", "Reports & Stats",
    "Projekte", "Projekte/Ärger", "Projekte/Ärger/Übersicht", "日本語",
    "Sent", "Drafts", "Trash", "Junk",
]
SPECIAL = {"Sent": "\\Sent", "Drafts": "\\Drafts", "Trash": "\\Trash", "Junk": "\\Junk",
           "Archive": "\\Archive"}
RICH_SUBSCRIBED = ["INBOX", "Archive", "Archive/2024", "Entwürfe", "Reports & Stats",
                   "Projekte/Ärger/Übersicht", "Sent", "Drafts", "Trash"]
KEYWORDS = [(7, "$Forwarded"), (5, "$Label1"), (11, "Project-X"), (13, "$MDNSent"), (4, "$NotJunk")]
SYSTEM = ["\\Seen", "\\Answered", "\\Flagged", "\\Deleted", "\\Draft"]
ZONES = ["+0000", "+0200", "-0500", "+0530", "-0800"]


def flags_for(i):
    fl = [f for b, f in enumerate(SYSTEM) if (i >> b) & 1 and not (f == "\\Deleted" and i % 3)]
    fl += [k for n, k in KEYWORDS if i % n == 0]
    return fl


def date_for(i, n):
    # Out of UID order: a restore that sorts by date (or by pack) shows up.
    t = 1704067200 + ((i * 37) % max(n, 1)) * 5400 + i
    zone = ZONES[i % len(ZONES)]
    sign = 1 if zone[0] == "+" else -1
    off = datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[3:5])) * sign
    d = datetime.datetime.fromtimestamp(t, datetime.timezone(off))
    return '"' + d.strftime("%d-%b-%Y %H:%M:%S ") + zone + '"'


def populate(args):
    m = connect(args)
    files = sorted(os.listdir(args.messages))
    bodies = [open(os.path.join(args.messages, f), "rb").read() for f in files]
    folders = ["INBOX"]
    if args.plan == "rich":
        for name in RICH_FOLDERS:
            enc = quote(mutf7_encode(name))
            if args.server == "cyrus" and name in SPECIAL:
                command(m, f"CREATE {name}", "CREATE", enc, f"(USE ({SPECIAL[name]}))")
            else:
                check(f"CREATE {name}", *m.create(enc))
            folders.append(name)
        # A folder subscribed to, then deleted: its subscription stays (Dovecot).
        check("CREATE Old Project", *m.create(quote("Old Project")))
        check("SUBSCRIBE Old Project", *m.subscribe(quote("Old Project")))
        check("DELETE Old Project", *m.delete(quote("Old Project")))
        subscribed = RICH_SUBSCRIBED
    else:
        check("CREATE Sent", *m.create("Sent")) if args.server != "cyrus" else \
            command(m, "CREATE Sent", "CREATE", "Sent", "(USE (\\Sent))")
        folders.append("Sent")
        subscribed = ["INBOX", "Sent"]
    for name in subscribed:
        check(f"SUBSCRIBE {name}", *m.subscribe(quote(mutf7_encode(name))))
    n = len(bodies)
    for i, body in enumerate(bodies):
        folder = folders[(i * 5) % len(folders)] if i % 4 else "INBOX"
        fl = flags_for(i)
        check(f"APPEND #{i} to {folder}",
              *m.append(quote(mutf7_encode(folder)), "(" + " ".join(fl) + ")", date_for(i, n),
                        body.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")))
    if args.plan == "rich":
        # Copies and moves out of INBOX, flag changes, expunges.
        check("SELECT INBOX", *m.select("INBOX"))
        typ, data = m.uid("SEARCH", None, "ALL")
        uids = check("SEARCH", typ, data)[0].split()
        copy = b",".join(uids[0:len(uids):6])
        move = b",".join(uids[1:len(uids):7])
        check("UID COPY", *m.uid("COPY", copy, quote("Archive")))
        check("UID MOVE", *m.uid("MOVE", move, quote(mutf7_encode("Entwürfe"))))
        check("UID STORE", *m.uid("STORE", b",".join(uids[2:len(uids):9]), "+FLAGS", "($Forwarded \\Answered)"))
        check("UID STORE", *m.uid("STORE", b",".join(uids[3:len(uids):10]), "-FLAGS", "(\\Seen)"))
        m.close()
        check("SELECT Archive", *m.select(quote("Archive")))
        typ, data = m.uid("SEARCH", None, "ALL")
        uids = check("SEARCH", typ, data)[0].split()
        gone = b",".join(uids[0:len(uids):4])
        check("UID STORE", *m.uid("STORE", gone, "+FLAGS.SILENT", "(\\Deleted)"))
        check("UID EXPUNGE", *m.uid("EXPUNGE", gone))
        # Appended after the expunge: UIDNEXT and the UIDs have holes.
        late = b"From: late@example.org\r\nSubject: after the expunge\r\n\r\nUIDs have a hole.\r\n"
        check("APPEND Archive late", *m.append(quote("Archive"), "(\\Seen $Forwarded)", date_for(3, n), late))
        m.close()
    m.logout()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("action", choices=["record", "populate"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--account", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--admin")
    p.add_argument("--messages")
    p.add_argument("--plan", choices=["rich", "plain"], default="rich")
    p.add_argument("--server", choices=["dovecot", "cyrus"], default="dovecot")
    args = p.parse_args()
    (record if args.action == "record" else populate)(args)


if __name__ == "__main__":
    main()
