//! 8-bit images and the pixel operations the pipeline needs: decoding, bilinear resize,
//! perspective warp with bicubic sampling, rotations, padding and normalisation.
//!
//! The sampling follows OpenCV's conventions (pixel centres at +0.5, replicated borders, the
//! cubic kernel with a = -0.75, warp coordinates in 1/32 pixel steps), because PP-OCR was
//! trained and is usually run with OpenCV's pre-processing: the same geometry gives the same
//! crops, and so the same reads.

use crate::OcrError;
use std::path::Path;

/// An 8-bit image, channels interleaved, rows top to bottom. The pipeline keeps colour images
/// in BGR order, the order PP-OCR's models were trained on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub width: usize,
    pub height: usize,
    pub channels: usize,
    pub data: Vec<u8>,
}

impl Image {
    /// A black image.
    pub fn new(width: usize, height: usize, channels: usize) -> Image {
        Image {
            width,
            height,
            channels,
            data: vec![0; width * height * channels],
        }
    }

    /// Reads a PNG or JPEG file into a 3-channel BGR image. Grey images are spread over the
    /// three channels; transparent pixels become white, as RapidOCR's loader makes them.
    pub fn read(path: &Path) -> Result<Image, OcrError> {
        let decoded = image::open(path).map_err(|e| OcrError::Image {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Ok(Image::from_rgba(&decoded.to_rgba8()))
    }

    /// Decodes PNG or JPEG bytes, as [`Image::read`] does a file.
    pub fn decode(bytes: &[u8]) -> Result<Image, OcrError> {
        let decoded = image::load_from_memory(bytes).map_err(|e| OcrError::Image {
            path: "<memory>".into(),
            reason: e.to_string(),
        })?;
        Ok(Image::from_rgba(&decoded.to_rgba8()))
    }

    fn from_rgba(rgba: &image::RgbaImage) -> Image {
        let (width, height) = (rgba.width() as usize, rgba.height() as usize);
        let mut out = Image::new(width, height, 3);
        for (dst, px) in out.data.chunks_exact_mut(3).zip(rgba.pixels()) {
            let [r, g, b, a] = px.0;
            // A colour where alpha is not zero, plus white in proportion to the transparency.
            let keep = |c: u8| if a == 0 { 0 } else { c };
            let white = 255 - a;
            dst[0] = keep(b).saturating_add(white);
            dst[1] = keep(g).saturating_add(white);
            dst[2] = keep(r).saturating_add(white);
        }
        out
    }

    /// Writes a 3-channel BGR image as an RGB PNG.
    pub fn write_png(&self, path: &Path) -> Result<(), OcrError> {
        assert_eq!(self.channels, 3, "write_png takes BGR images");
        let mut rgb = Vec::with_capacity(self.data.len());
        for px in self.data.chunks_exact(3) {
            rgb.extend_from_slice(&[px[2], px[1], px[0]]);
        }
        image::save_buffer(
            path,
            &rgb,
            self.width as u32,
            self.height as u32,
            image::ExtendedColorType::Rgb8,
        )
        .map_err(|e| OcrError::Image {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    }

    fn pixel(&self, x: usize, y: usize) -> &[u8] {
        let at = (y * self.width + x) * self.channels;
        &self.data[at..at + self.channels]
    }

    /// Bilinear resize with OpenCV's `INTER_LINEAR` geometry and fixed-point arithmetic: the
    /// source position of output pixel `d` is `(d + 0.5) * scale - 0.5`, clamped to the image;
    /// weights are in 1/2048 steps.
    pub fn resize_linear(&self, width: usize, height: usize) -> Image {
        let mut out = Image::new(width, height, self.channels);
        if width == 0 || height == 0 || self.width == 0 || self.height == 0 {
            return out;
        }
        let c = self.channels;
        let xs = linear_taps(self.width, width);
        let ys = linear_taps(self.height, height);
        // Rows resized horizontally (values times 2048), the two last ones kept: going down,
        // consecutive output rows mostly read the same source rows.
        let resize_row = |y: usize, dst: &mut Vec<i32>| {
            let src = self.row(y);
            dst.clear();
            for &(x0, x1, w1) in &xs {
                for k in 0..c {
                    dst.push(
                        src[x0 * c + k] as i32 * (WEIGHT_ONE - w1) + src[x1 * c + k] as i32 * w1,
                    );
                }
            }
        };
        let (mut rows, mut have) = ([Vec::new(), Vec::new()], [usize::MAX; 2]);
        for (y, &(y0, y1, w1)) in ys.iter().enumerate() {
            let i0 = match have.iter().position(|&h| h == y0) {
                Some(i) => i,
                None => {
                    let i = usize::from(have[0] == y1);
                    resize_row(y0, &mut rows[i]);
                    have[i] = y0;
                    i
                }
            };
            let i1 = match have.iter().position(|&h| h == y1) {
                Some(i) => i,
                None => {
                    resize_row(y1, &mut rows[1 - i0]);
                    have[1 - i0] = y1;
                    1 - i0
                }
            };
            let (b0, b1) = (WEIGHT_ONE - w1, w1);
            let dst = &mut out.data[y * width * c..(y + 1) * width * c];
            for ((d, &r0), &r1) in dst.iter_mut().zip(&rows[i0]).zip(&rows[i1]) {
                // Rounds as OpenCV's vertical pass does, shifting in two steps to stay in i32.
                let v = (((b0 * (r0 >> 4)) >> 16) + ((b1 * (r1 >> 4)) >> 16) + 2) >> 2;
                *d = v.clamp(0, 255) as u8;
            }
        }
        out
    }

    fn row(&self, y: usize) -> &[u8] {
        let len = self.width * self.channels;
        &self.data[y * len..(y + 1) * len]
    }

    /// The image turned by 180 degrees.
    pub fn rotate_180(&self) -> Image {
        let mut out = self.clone();
        let c = self.channels;
        for (dst, src) in out
            .data
            .chunks_exact_mut(c)
            .zip(self.data.chunks_exact(c).rev())
        {
            dst.copy_from_slice(src);
        }
        out
    }

    /// The image turned by 90 degrees counter-clockwise (numpy's `rot90`).
    pub fn rotate_90_ccw(&self) -> Image {
        let mut out = Image::new(self.height, self.width, self.channels);
        let c = self.channels;
        for y in 0..out.height {
            for x in 0..out.width {
                // Output row y is input column (width - 1 - y), read top to bottom.
                let src = self.pixel(self.width - 1 - y, x);
                let at = (y * out.width + x) * c;
                out.data[at..at + c].copy_from_slice(src);
            }
        }
        out
    }

    /// The image with black borders added above and below.
    pub fn pad_vertical(&self, top: usize, bottom: usize) -> Image {
        let mut out = Image::new(self.width, self.height + top + bottom, self.channels);
        let len = self.width * self.channels;
        out.data[top * len..(top + self.height) * len].copy_from_slice(&self.data);
        out
    }

    /// Samples the image at the positions a 3x3 homography maps the output pixels to
    /// (`to_source`: output → input), with OpenCV's bicubic kernel and replicated borders.
    pub fn warp_perspective_cubic(
        &self,
        to_source: &[f64; 9],
        width: usize,
        height: usize,
    ) -> Image {
        let mut out = Image::new(width, height, self.channels);
        if self.width == 0 || self.height == 0 {
            return out;
        }
        let c = self.channels;
        let m = to_source;
        let clamp = |v: i64, n: usize| v.clamp(0, n as i64 - 1) as usize;
        for y in 0..height {
            for x in 0..width {
                let (xf, yf) = (x as f64, y as f64);
                let w = m[6] * xf + m[7] * yf + m[8];
                let scale = if w == 0.0 { 0.0 } else { SUBPIXELS as f64 / w };
                // Positions in 1/32 pixel, rounded, as OpenCV's remap tables hold them.
                let sx = ((m[0] * xf + m[1] * yf + m[2]) * scale).round() as i64;
                let sy = ((m[3] * xf + m[4] * yf + m[5]) * scale).round() as i64;
                let (ix, iy) = (sx.div_euclid(SUBPIXELS), sy.div_euclid(SUBPIXELS));
                let wx = cubic_weights(sx.rem_euclid(SUBPIXELS) as f32 / SUBPIXELS as f32);
                let wy = cubic_weights(sy.rem_euclid(SUBPIXELS) as f32 / SUBPIXELS as f32);
                for k in 0..c {
                    let mut sum = 0f32;
                    for (j, wyj) in wy.iter().enumerate() {
                        let row = self.row(clamp(iy + j as i64 - 1, self.height));
                        let mut line = 0f32;
                        for (i, wxi) in wx.iter().enumerate() {
                            let col = clamp(ix + i as i64 - 1, self.width);
                            line += wxi * row[col * c + k] as f32;
                        }
                        sum += wyj * line;
                    }
                    out.data[(y * width + x) * c + k] = to_u8(sum);
                }
            }
        }
        out
    }

    /// Draws a closed polygon's outline, `thickness` pixels wide, in a colour given per channel.
    pub fn draw_polygon(&mut self, corners: &[[f64; 2]], color: &[u8], thickness: usize) {
        let n = corners.len();
        let r = thickness.max(1) as i64 / 2;
        for i in 0..n {
            let (a, b) = (corners[i], corners[(i + 1) % n]);
            let steps = (b[0] - a[0]).abs().max((b[1] - a[1]).abs()).ceil().max(1.0) as usize;
            for s in 0..=steps {
                let t = s as f64 / steps as f64;
                let x = (a[0] + (b[0] - a[0]) * t).round() as i64;
                let y = (a[1] + (b[1] - a[1]) * t).round() as i64;
                for yy in y - r..=y + r {
                    for xx in x - r..=x + r {
                        if xx >= 0
                            && yy >= 0
                            && (xx as usize) < self.width
                            && (yy as usize) < self.height
                        {
                            let at = (yy as usize * self.width + xx as usize) * self.channels;
                            for (d, c) in self.data[at..at + self.channels].iter_mut().zip(color) {
                                *d = *c;
                            }
                        }
                    }
                }
            }
        }
    }

    /// The image as a `[channels, height, pad_width]` float plane, each value mapped from
    /// `[0, 255]` to `[-1, 1]` and the columns past the image's width left at 0.
    pub fn to_chw_normalized(&self, pad_width: usize) -> Vec<f32> {
        let (w, h, c) = (self.width.min(pad_width), self.height, self.channels);
        let table: Vec<f32> = (0..=255u8)
            .map(|v| (v as f32 / 255.0 - 0.5) / 0.5)
            .collect();
        let mut out = vec![0f32; c * h * pad_width];
        for y in 0..h {
            let row = self.row(y);
            for k in 0..c {
                let dst = &mut out[(k * h + y) * pad_width..][..w];
                for (d, px) in dst.iter_mut().zip(row.chunks_exact(c)) {
                    *d = table[px[k] as usize];
                }
            }
        }
        out
    }
}

/// OpenCV's `INTER_TAB_SIZE`: warp positions are quantized to this many steps per pixel.
const SUBPIXELS: i64 = 32;

/// Fixed-point 1.0 for the bilinear weights.
const WEIGHT_ONE: i32 = 2048;

fn to_u8(v: f32) -> u8 {
    v.round().clamp(0.0, 255.0) as u8
}

/// For each output index: the two source indices and the second's weight in 1/2048.
fn linear_taps(src: usize, dst: usize) -> Vec<(usize, usize, i32)> {
    let scale = src as f64 / dst as f64;
    (0..dst)
        .map(|d| {
            let pos = ((d as f64 + 0.5) * scale - 0.5) as f32;
            let mut i = pos.floor();
            let mut t = pos - i;
            if i < 0.0 {
                i = 0.0;
                t = 0.0;
            }
            let i = i as usize;
            if i >= src - 1 {
                (src - 1, src - 1, 0)
            } else {
                (
                    i,
                    i + 1,
                    WEIGHT_ONE - ((1.0 - t) * WEIGHT_ONE as f32).round() as i32,
                )
            }
        })
        .collect()
}

/// Keys' cubic convolution weights (a = -0.75, OpenCV's choice) for the four taps around a
/// position `t` in `[0, 1)` past the second tap.
fn cubic_weights(t: f32) -> [f32; 4] {
    const A: f32 = -0.75;
    let w0 = ((A * (t + 1.0) - 5.0 * A) * (t + 1.0) + 8.0 * A) * (t + 1.0) - 4.0 * A;
    let w1 = ((A + 2.0) * t - (A + 3.0)) * t * t + 1.0;
    let u = 1.0 - t;
    let w2 = ((A + 2.0) * u - (A + 3.0)) * u * u + 1.0;
    [w0, w1, w2, 1.0 - w0 - w1 - w2]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(width: usize, height: usize) -> Image {
        let mut img = Image::new(width, height, 1);
        for y in 0..height {
            for x in 0..width {
                img.data[y * width + x] = (x * 10 + y * 3) as u8;
            }
        }
        img
    }

    #[test]
    fn resize_to_the_same_size_is_the_identity() {
        let img = gradient(7, 5);
        assert_eq!(img.resize_linear(7, 5), img);
    }

    #[test]
    fn doubling_interpolates_between_pixel_centres() {
        let mut img = Image::new(2, 1, 1);
        img.data = vec![0, 100];
        let up = img.resize_linear(4, 1);
        // Source positions -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to 1).
        assert_eq!(up.data, vec![0, 25, 75, 100]);
    }

    #[test]
    fn rotations_move_corners_where_expected() {
        let img = gradient(3, 2);
        let r = img.rotate_180();
        assert_eq!(r.data[0], img.data[5]);
        assert_eq!(r.rotate_180(), img);
        let q = img.rotate_90_ccw();
        assert_eq!((q.width, q.height), (2, 3));
        // The top-right corner comes to the top-left, the top-left to the bottom-left.
        assert_eq!(q.data[0], img.data[2]);
        assert_eq!(q.data[4], img.data[0]);
    }

    #[test]
    fn cubic_weights_sum_to_one_and_interpolate_at_taps() {
        for i in 0..32 {
            let w = cubic_weights(i as f32 / 32.0);
            assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        }
        assert_eq!(cubic_weights(0.0), [0.0, 1.0, 0.0, 0.0]);
    }

    #[test]
    fn identity_warp_copies_and_a_shift_reads_the_next_column() {
        let img = gradient(6, 4);
        let identity = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        assert_eq!(img.warp_perspective_cubic(&identity, 6, 4), img);
        let shift = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0];
        let out = img.warp_perspective_cubic(&shift, 4, 2);
        assert_eq!(out.data[0], img.data[6 + 1]);
    }

    #[test]
    fn normalisation_maps_to_minus_one_one_and_pads_with_zero() {
        let mut img = Image::new(1, 1, 3);
        img.data = vec![0, 255, 51];
        let v = img.to_chw_normalized(2);
        assert_eq!(v.len(), 6);
        assert_eq!(v[0], -1.0);
        assert_eq!(v[1], 0.0);
        assert_eq!(v[2], 1.0);
        assert!((v[4] - (51.0 / 255.0 - 0.5) / 0.5).abs() < 1e-6);
    }

    #[test]
    fn polygons_are_drawn_on_their_outline_and_clipped() {
        let mut img = Image::new(10, 8, 3);
        img.draw_polygon(
            &[[1.0, 1.0], [8.0, 1.0], [8.0, 6.0], [1.0, 6.0]],
            &[0, 0, 255],
            1,
        );
        let red = |x: usize, y: usize| img.data[(y * 10 + x) * 3 + 2] == 255;
        assert!(red(1, 1) && red(8, 6) && red(4, 1) && red(1, 4));
        assert!(!red(4, 3), "the inside stays as it was");
        let mut edge = Image::new(4, 4, 3);
        edge.draw_polygon(
            &[[-5.0, -5.0], [10.0, 2.0], [2.0, 10.0]],
            &[255, 255, 255],
            3,
        );
    }

    #[test]
    fn transparent_pixels_become_white() {
        let rgba = image::RgbaImage::from_raw(2, 1, vec![10, 20, 30, 255, 10, 20, 30, 0]).unwrap();
        let img = Image::from_rgba(&rgba);
        assert_eq!(img.data, vec![30, 20, 10, 255, 255, 255]);
    }
}
