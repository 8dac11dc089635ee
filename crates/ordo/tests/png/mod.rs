//! Decoding the PNG screenshots headless Chromium writes, for the tests that look at them.

/// Decodes an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes) into rows of pixels.
pub fn png_pixels(bytes: &[u8]) -> (u32, u32, usize, Vec<u8>) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    let (mut pos, mut idat, mut hdr) = (8, Vec::new(), None);
    while pos + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        let kind = &bytes[pos + 4..pos + 8];
        let data = &bytes[pos + 8..pos + 8 + len];
        match kind {
            b"IHDR" => hdr = Some(data.to_vec()),
            b"IDAT" => idat.extend_from_slice(data),
            _ => {}
        }
        pos += 12 + len;
    }
    let h = hdr.expect("IHDR");
    let (w, ht) = (
        u32::from_be_bytes(h[0..4].try_into().expect("4 bytes")),
        u32::from_be_bytes(h[4..8].try_into().expect("4 bytes")),
    );
    assert_eq!(h[8], 8, "8-bit PNG");
    assert_eq!(h[12], 0, "non-interlaced PNG");
    let bpp = match h[9] {
        2 => 3,
        6 => 4,
        t => panic!("PNG colour type {t}"),
    };
    let mut raw = Vec::new();
    use std::io::Read;
    flate2::read::ZlibDecoder::new(&idat[..]).read_to_end(&mut raw).expect("zlib data");
    let stride = w as usize * bpp;
    let mut px = vec![0u8; stride * ht as usize];
    for y in 0..ht as usize {
        let f = raw[y * (stride + 1)];
        let line = &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)];
        for x in 0..stride {
            let a = if x >= bpp { px[y * stride + x - bpp] as i32 } else { 0 };
            let b = if y > 0 { px[(y - 1) * stride + x] as i32 } else { 0 };
            let c = if x >= bpp && y > 0 { px[(y - 1) * stride + x - bpp] as i32 } else { 0 };
            let pred = match f {
                0 => 0,
                1 => a,
                2 => b,
                3 => (a + b) / 2,
                4 => {
                    let p = a + b - c;
                    let (pa, pb, pc) = ((p - a).abs(), (p - b).abs(), (p - c).abs());
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                _ => panic!("PNG filter {f}"),
            };
            px[y * stride + x] = (line[x] as i32 + pred) as u8;
        }
    }
    (w, ht, bpp, px)
}
