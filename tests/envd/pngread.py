"""A tiny PNG reader for tests: 8-bit RGB or RGBA, not interlaced (stdlib only)."""

import struct
import zlib


class Png:
    """A tiny PNG reader: 8-bit RGB or RGBA, not interlaced."""

    def __init__(self, data):
        if data[:8] != b"\x89PNG\r\n\x1a\n":
            raise ValueError("not a PNG")
        pos, idat, self.chunks = 8, [], []
        while pos < len(data):
            n, kind = struct.unpack(">I4s", data[pos:pos + 8])
            body = data[pos + 8:pos + 8 + n]
            crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
            if zlib.crc32(kind + body) != crc:
                raise ValueError("bad CRC in %r" % kind)
            self.chunks.append(kind)
            if kind == b"IHDR":
                (self.width, self.height, depth, ctype, _, _,
                 interlace) = struct.unpack(">IIBBBBB", body)
                if depth != 8 or ctype not in (2, 6) or interlace:
                    raise ValueError("unsupported PNG %d/%d/%d" % (depth, ctype, interlace))
                self.bpp = 3 if ctype == 2 else 4
            elif kind == b"IDAT":
                idat.append(body)
            pos += 12 + n
        if self.chunks[0] != b"IHDR" or self.chunks[-1] != b"IEND":
            raise ValueError("chunks out of order: %r" % self.chunks)
        raw = zlib.decompress(b"".join(idat))
        stride = self.width * self.bpp
        if len(raw) != self.height * (stride + 1):
            raise ValueError("image data is %d bytes, want %d" % (
                len(raw), self.height * (stride + 1)))
        self.rows = []
        prev = bytearray(stride)
        for y in range(self.height):
            f = raw[y * (stride + 1)]
            line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
            self._unfilter(f, line, prev)
            self.rows.append(line)
            prev = line

    def _unfilter(self, f, line, prev):
        bpp = self.bpp
        if f == 0:
            return
        for i in range(len(line)):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                p = a
            elif f == 2:
                p = b
            elif f == 3:
                p = (a + b) // 2
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            else:
                raise ValueError("bad filter %d" % f)
            line[i] = (line[i] + p) & 0xFF

    def pixel(self, x, y):
        o = x * self.bpp
        return tuple(self.rows[y][o:o + 3])
