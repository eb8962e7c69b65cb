"""The built-in template `data` (rootfs/templates/data.json) doing what
people ask of a sandbox, end to end through the API: a CSV pivoted with
pandas into an .xlsx with a chart (openpyxl), read back here; a .docx
turned into Markdown by pandoc; a PDF made and read back (matplotlib,
pypdf); playwright-core driving Chromium against a page served inside the
sandbox. `make images` builds the template; a cubicled that finds none
builds it on first use (minutes), which this test then waits for."""

import csv
import io
import json
import os
import re
import unittest
import zipfile

from cubicled import Cubicled

srv = None
key = None
cid = None

SALES = [("region", "quarter", "product", "sales")] + [
    (region, "Q%d" % q, product, 100 * q + 10 * i + len(region))
    for i, region in enumerate(("North", "South", "East", "West"))
    for q in (1, 2, 3, 4) for product in ("tea", "coffee")]


def setUpModule():
    global srv, key, cid
    srv = Cubicled().start()
    _, key = srv.workspace("data")
    t = srv.ok("GET", "/v1/templates/data?wait=ready&timeout_s=3000", key=key, timeout=3100)
    assert t["state"] == "ready", t
    assert t["builtin"] and t["global"], t
    cid = srv.computer(key, template="data", size="md")["id"]


def tearDownModule():
    srv.stop()


def bash(cmd, timeout_s=120):
    return srv.act(cid, "bash", {"command": cmd, "timeout_s": timeout_s}, key=key)


def put(path, data):
    srv.ok("PUT", "/v1/computers/%s/files?path=%s" % (cid, path), data, key=key)


def get(path):
    r = srv.req("GET", "/v1/computers/%s/files?path=%s" % (cid, path), key=key)
    assert r.status == 200, (path, r.status, r.body[:300])
    return r.body


PIVOT = r'''
import pandas as pd
from openpyxl.chart import BarChart, Reference

df = pd.read_csv("/home/user/sales.csv")
pivot = df.pivot_table(index="region", columns="quarter", values="sales", aggfunc="sum")
with pd.ExcelWriter("/home/user/report.xlsx", engine="openpyxl") as xw:
    pivot.to_excel(xw, sheet_name="pivot")
    ws = xw.sheets["pivot"]
    chart = BarChart()
    chart.title = "Sales by region"
    data = Reference(ws, min_col=2, max_col=1 + len(pivot.columns), min_row=1,
                     max_row=1 + len(pivot))
    chart.add_data(data, titles_from_data=True)
    chart.set_categories(Reference(ws, min_col=1, min_row=2, max_row=1 + len(pivot)))
    ws.add_chart(chart, "H2")
print(pivot.to_json())
'''

PDF = r'''
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from pypdf import PdfReader

plt.bar(["a", "b", "c"], [3, 1, 2])
plt.title("bars")
plt.savefig("/home/user/bars.pdf")
plt.savefig("/home/user/bars.png")
reader = PdfReader("/home/user/bars.pdf")
print(len(reader.pages), reader.metadata.producer)
'''


def docx(paragraphs):
    """A minimal .docx made here (the way a user's upload arrives)."""
    ns = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    body = ""
    for style, runs in paragraphs:
        ppr = '<w:pPr><w:pStyle w:val="%s"/></w:pPr>' % style if style else ""
        rs = "".join('<w:r>%s<w:t xml:space="preserve">%s</w:t></w:r>' %
                     ("<w:rPr><w:b/></w:rPr>" if bold else "", text) for text, bold in runs)
        body += "<w:p>%s%s</w:p>" % (ppr, rs)
    files = {
        "[Content_Types].xml":
            '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.'
            'org/package/2006/content-types"><Default Extension="rels" ContentType="application/'
            'vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType='
            '"application/xml"/><Override PartName="/word/document.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/><Override '
            'PartName="/word/styles.xml" ContentType="application/vnd.openxmlformats-'
            'officedocument.wordprocessingml.styles+xml"/></Types>',
        "_rels/.rels":
            '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.'
            'openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http:'
            '//schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
            'Target="word/document.xml"/></Relationships>',
        "word/_rels/document.xml.rels":
            '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.'
            'openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http:'
            '//schemas.openxmlformats.org/officeDocument/2006/relationships/styles" '
            'Target="styles.xml"/></Relationships>',
        "word/styles.xml":
            '<?xml version="1.0" encoding="UTF-8"?><w:styles %s><w:style w:type="paragraph" '
            'w:styleId="Heading1"><w:name w:val="heading 1"/><w:pPr><w:outlineLvl w:val="0"/>'
            '</w:pPr></w:style></w:styles>' % ns,
        "word/document.xml":
            '<?xml version="1.0" encoding="UTF-8"?><w:document %s><w:body>%s</w:body>'
            '</w:document>' % (ns, body),
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in files.items():
            z.writestr(name, text)
    return out.getvalue()


class DataTemplate(unittest.TestCase):
    def test_csv_pivot_to_xlsx_with_chart(self):
        text = io.StringIO()
        csv.writer(text).writerows(SALES)
        put("/home/user/sales.csv", text.getvalue().encode())
        out = srv.act(cid, "python", {"code": PIVOT, "timeout_s": 120}, key=key)
        self.assertEqual(out["exit_code"], 0, out)
        pivot = json.loads(out["stdout"])
        expected = {}
        for region, quarter, _, sales in SALES[1:]:
            expected[(region, quarter)] = expected.get((region, quarter), 0) + sales
        for (region, quarter), total in expected.items():
            self.assertEqual(pivot[quarter][region], total)
        # Read back here: the workbook, its sheet's numbers, its chart.
        z = zipfile.ZipFile(io.BytesIO(get("/home/user/report.xlsx")))
        names = z.namelist()
        self.assertIn("xl/charts/chart1.xml", names)
        chart = z.read("xl/charts/chart1.xml").decode()
        self.assertIn("barChart", chart)
        self.assertIn("Sales by region", chart)
        sheet = z.read("xl/worksheets/sheet1.xml").decode()
        values = {float(v) for v in re.findall(r"<v>([0-9.]+)</v>", sheet)}
        for total in expected.values():
            self.assertIn(float(total), values)
        strings = z.read("xl/sharedStrings.xml").decode() if "xl/sharedStrings.xml" in names \
            else sheet
        for region in ("North", "South", "East", "West"):
            self.assertIn(region, strings)

    def test_docx_to_markdown(self):
        put("/home/user/report.docx", docx([
            ("Heading1", [("Quarterly report", False)]),
            (None, [("Our ", False), ("revenue", True), (" grew by 12%.", False)]),
        ]))
        out = bash("cd ~ && pandoc -f docx -t gfm report.docx -o report.md && echo ok")
        self.assertEqual(out["stdout"], "ok\n", out)
        md = get("/home/user/report.md").decode()
        self.assertIn("# Quarterly report", md)
        self.assertIn("Our **revenue** grew by 12%.", md)

    def test_pdf_and_png_from_matplotlib(self):
        out = srv.act(cid, "python", {"code": PDF, "timeout_s": 120}, key=key)
        self.assertEqual(out["exit_code"], 0, out)
        self.assertTrue(out["stdout"].startswith("1 Matplotlib"), out)
        self.assertEqual(get("/home/user/bars.pdf")[:5], b"%PDF-")
        self.assertEqual(get("/home/user/bars.png")[:8], b"\x89PNG\r\n\x1a\n")

    def test_playwright_drives_chromium(self):
        page = ('<!doctype html><title>cubicle form</title><input id="name">'
                '<button id="go" onclick="document.getElementById(\'out\').textContent = '
                '\'hello \' + document.getElementById(\'name\').value">go</button>'
                '<p id="out"></p>')
        put("/home/user/site/page.html", page.encode())
        script = r'''
const { chromium } = require('playwright-core');
(async () => {
  const browser = await chromium.launch({executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update',
           '--disable-sync', '--no-first-run', '--disable-quic']});
  const page = await browser.newPage();
  await page.goto('http://127.0.0.1:8765/page.html');
  await page.fill('#name', 'cubicle');
  await page.click('#go');
  const text = await page.textContent('#out');
  await page.screenshot({path: '/home/user/shot.png'});
  console.log(JSON.stringify({title: await page.title(), text}));
  await browser.close();
})().catch(e => { console.error(e); process.exit(1); });
'''
        put("/home/user/drive.js", script.encode())
        # The page is served inside the sandbox: its own loopback.
        out = bash("setsid -f python3 -m http.server 8765 --bind 127.0.0.1 --directory "
                   "~/site >/dev/null 2>&1; for i in $(seq 100); do curl -sf -o /dev/null "
                   "http://127.0.0.1:8765/page.html && break; sleep 0.1; done; "
                   "cd /tmp && node ~/drive.js", timeout_s=180)
        self.assertEqual(out["exit_code"], 0, out)
        got = json.loads(out["stdout"].strip().splitlines()[-1])
        self.assertEqual(got, {"title": "cubicle form", "text": "hello cubicle"})
        self.assertEqual(get("/home/user/shot.png")[:8], b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
    unittest.main()
