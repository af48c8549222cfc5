//! Text detection with DB (Differentiable Binarization): the detector's input size, and the
//! post-processing that turns its probability map into boxes.
//!
//! The steps and constants are PP-OCR's (and RapidOCR's defaults): threshold the map at 0.3,
//! dilate by 2x2, take each region's minimum-area rectangle, keep it when the map's mean inside
//! it is at least 0.5, grow it by `area * 1.6 / perimeter` ("unclip"), and scale it back to
//! the image.

use crate::geometry::{self, Point, Quad};

/// The detector's settings.
#[derive(Clone, Debug)]
pub struct DbOptions {
    /// The input's shorter side is scaled up to at least this many pixels.
    pub limit_side_len: usize,
    /// Probability above which a pixel is text.
    pub thresh: f32,
    /// Mean probability a box needs to be kept.
    pub box_thresh: f32,
    /// At most this many regions are considered.
    pub max_candidates: usize,
    /// How far boxes grow, relative to their area over their perimeter.
    pub unclip_ratio: f64,
    /// Dilate the text mask by 2x2 before finding regions.
    pub dilate: bool,
}

impl Default for DbOptions {
    fn default() -> Self {
        DbOptions {
            limit_side_len: 736,
            thresh: 0.3,
            box_thresh: 0.5,
            max_candidates: 1000,
            unclip_ratio: 1.6,
            dilate: true,
        }
    }
}

/// Regions narrower than this (in map pixels) are noise.
const MIN_SIZE: f64 = 3.0;

/// The detector's input size for an image: scaled so that the shorter side reaches
/// `limit_side_len` (never down), then each side rounded to a multiple of 32, at least 32.
pub fn input_size(width: usize, height: usize, limit_side_len: usize) -> (usize, usize) {
    let short = width.min(height).max(1);
    let ratio = if short < limit_side_len {
        limit_side_len as f64 / short as f64
    } else {
        1.0
    };
    let round32 = |v: usize| {
        ((((v as f64 * ratio) as usize) as f64 / 32.0).round_ties_even() as usize * 32).max(32)
    };
    (round32(width), round32(height))
}

/// A detected text box in image pixels, corners clockwise from the top-left, and the map's
/// mean probability inside it.
#[derive(Clone, Debug, PartialEq)]
pub struct TextBox {
    pub corners: Quad,
    pub score: f32,
}

/// Boxes from a `map_width x map_height` probability map, scaled to an image of
/// `image_width x image_height`, in reading order.
pub fn boxes_from_map(
    prob: &[f32],
    map_width: usize,
    map_height: usize,
    image_width: usize,
    image_height: usize,
    options: &DbOptions,
) -> Vec<TextBox> {
    let mut mask: Vec<bool> = prob.iter().map(|&p| p > options.thresh).collect();
    if options.dilate {
        mask = dilate_2x2(&mask, map_width, map_height);
    }
    let mut boxes = Vec::new();
    for region in regions(&mask, map_width, map_height)
        .into_iter()
        .take(options.max_candidates)
    {
        let rect = geometry::min_area_rect(&region);
        if rect.short_side() < MIN_SIZE {
            continue;
        }
        let mini = geometry::order_box(&rect.corners);
        let score = mean_inside(prob, map_width, map_height, &mini);
        if score < options.box_thresh {
            continue;
        }
        let distance = geometry::area(&mini) * options.unclip_ratio / geometry::perimeter(&mini);
        let grown = geometry::min_area_rect(&geometry::offset_round(&mini, distance));
        if grown.short_side() < MIN_SIZE + 2.0 {
            continue;
        }
        let scale = |v: f64, from: usize, to: usize| {
            (v / from as f64 * to as f64)
                .round_ties_even()
                .clamp(0.0, to as f64)
        };
        let scaled = geometry::order_box(&grown.corners).map(|p| {
            [
                scale(p[0], map_width, image_width),
                scale(p[1], map_height, image_height),
            ]
        });
        // Clockwise from the top-left, inside the image, at least 4 pixels each way.
        let corners = geometry::order_clockwise(&scaled).map(|p| {
            [
                p[0].clamp(0.0, image_width as f64 - 1.0).trunc(),
                p[1].clamp(0.0, image_height as f64 - 1.0).trunc(),
            ]
        });
        let dist = |a: Point, b: Point| (a[0] - b[0]).hypot(a[1] - b[1]).trunc();
        if dist(corners[0], corners[1]) <= 3.0 || dist(corners[0], corners[3]) <= 3.0 {
            continue;
        }
        boxes.push(TextBox { corners, score });
    }
    reading_order(&mut boxes);
    boxes
}

/// Each pixel becomes the maximum of itself and its neighbours above and to the left
/// (OpenCV's `dilate` with a 2x2 kernel anchored at its centre).
fn dilate_2x2(mask: &[bool], width: usize, height: usize) -> Vec<bool> {
    let mut out = vec![false; mask.len()];
    let mut column = vec![false; width];
    for y in 0..height {
        let row = &mask[y * width..(y + 1) * width];
        for (x, c) in column.iter_mut().enumerate() {
            *c = row[x] || (y > 0 && mask[(y - 1) * width + x]);
        }
        let dst = &mut out[y * width..(y + 1) * width];
        for x in 0..width {
            dst[x] = column[x] || (x > 0 && column[x - 1]);
        }
    }
    out
}

/// A horizontal run of equal mask pixels, `x0..=x1` on row `y`.
struct Run {
    y: usize,
    x0: usize,
    x1: usize,
    text: bool,
}

/// The point sets whose convex hulls are the hulls of the mask's contours, as OpenCV's
/// `findContours(RETR_LIST)` finds them: one per 8-connected region of text pixels (its outer
/// border), and one per hole in a region (the text pixels 4-adjacent to a 4-connected
/// background area that does not reach the map's edge).
///
/// Regions are labelled by runs (union-find over the runs of consecutive rows), so the cost
/// follows the number of runs, not of pixels; a region's hull is the hull of its runs' ends.
fn regions(mask: &[bool], width: usize, height: usize) -> Vec<Vec<Point>> {
    let mut runs = Vec::new();
    let mut row_start = Vec::with_capacity(height + 1);
    for y in 0..height {
        row_start.push(runs.len());
        let row = &mask[y * width..(y + 1) * width];
        let mut x = 0;
        while x < width {
            let (text, x0) = (row[x], x);
            while x < width && row[x] == text {
                x += 1;
            }
            runs.push(Run {
                y,
                x0,
                x1: x - 1,
                text,
            });
        }
    }
    row_start.push(runs.len());
    let mut parent: Vec<usize> = (0..runs.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for y in 1..height {
        let (above, here) = (
            row_start[y - 1]..row_start[y],
            row_start[y]..row_start[y + 1],
        );
        let mut first = above.start;
        for b in here {
            // Text touches diagonally (8-connected), background only edge to edge.
            let reach = usize::from(runs[b].text);
            while first < above.end && runs[first].x1 + reach < runs[b].x0 {
                first += 1;
            }
            let mut a = first;
            while a < above.end && runs[a].x0 <= runs[b].x1 + reach {
                if runs[a].text == runs[b].text {
                    let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
                    parent[ra.max(rb)] = ra.min(rb);
                }
                a += 1;
            }
        }
    }
    let mut index = vec![usize::MAX; runs.len()];
    // Per region: its points, whether it is text, and whether it reaches the map's edge.
    let mut found: Vec<(Vec<Point>, bool, bool)> = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        let r = root(&mut parent, i);
        if index[r] == usize::MAX {
            index[r] = found.len();
            found.push((Vec::new(), run.text, false));
        }
        let (points, _, reaches_edge) = &mut found[index[r]];
        let &Run { y, x0, x1, text } = run;
        let (x0f, x1f, yf) = (x0 as f64, x1 as f64, y as f64);
        if text {
            points.extend([[x0f, yf], [x1f, yf]]);
        } else {
            *reaches_edge |= y == 0 || y + 1 == height || x0 == 0 || x1 + 1 == width;
            // The hole's pixels grown by their 4 neighbours: its extreme points are the text
            // pixels around it.
            points.extend([
                [x0f - 1.0, yf],
                [x1f + 1.0, yf],
                [x0f, yf - 1.0],
                [x1f, yf - 1.0],
                [x0f, yf + 1.0],
                [x1f, yf + 1.0],
            ]);
        }
    }
    found
        .into_iter()
        .filter(|(_, text, edge)| *text || !edge)
        .map(|(points, _, _)| points)
        .collect()
}

/// The map's mean over the pixels inside the box ("fast" score: the box, not the contour).
fn mean_inside(prob: &[f32], width: usize, height: usize, corners: &Quad) -> f32 {
    let xs = corners.iter().map(|p| p[0]);
    let ys = corners.iter().map(|p| p[1]);
    let lo = |it: &mut dyn Iterator<Item = f64>, n: usize| {
        it.fold(f64::MAX, f64::min)
            .floor()
            .clamp(0.0, n as f64 - 1.0) as usize
    };
    let hi = |it: &mut dyn Iterator<Item = f64>, n: usize| {
        it.fold(f64::MIN, f64::max)
            .ceil()
            .clamp(0.0, n as f64 - 1.0) as usize
    };
    let (x0, x1) = (lo(&mut xs.clone(), width), hi(&mut xs.clone(), width));
    let (y0, y1) = (lo(&mut ys.clone(), height), hi(&mut ys.clone(), height));
    // The polygon in integer pixels relative to the window, as OpenCV's fillPoly takes it.
    let poly: Vec<Point> = corners
        .iter()
        .map(|p| [(p[0] - x0 as f64).trunc(), (p[1] - y0 as f64).trunc()])
        .collect();
    let (mut sum, mut count) = (0f64, 0usize);
    for y in y0..=y1 {
        for x in x0..=x1 {
            if geometry::inside_convex(&poly, [(x - x0) as f64, (y - y0) as f64]) {
                sum += prob[y * width + x] as f64;
                count += 1;
            }
        }
    }
    if count == 0 {
        0.0
    } else {
        (sum / count as f64) as f32
    }
}

/// Sorts boxes top to bottom, then left to right within a line: boxes whose top-left corners
/// are less than 10 pixels apart vertically are on one line.
pub fn reading_order(boxes: &mut [TextBox]) {
    boxes.sort_by(|a, b| {
        a.corners[0][1]
            .total_cmp(&b.corners[0][1])
            .then(a.corners[0][0].total_cmp(&b.corners[0][0]))
    });
    for i in 0..boxes.len().saturating_sub(1) {
        for j in (0..=i).rev() {
            let (a, b) = (boxes[j].corners[0], boxes[j + 1].corners[0]);
            if (b[1] - a[1]).abs() < 10.0 && b[0] < a[0] {
                boxes.swap(j, j + 1);
            } else {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_size_raises_the_short_side_and_rounds_to_32() {
        assert_eq!(input_size(400, 310, 736), (960, 736));
        assert_eq!(input_size(516, 276, 736), (1376, 736));
        assert_eq!(input_size(451, 182, 736), (1824, 736));
        // Large images keep their size, rounded.
        assert_eq!(input_size(1000, 800, 736), (992, 800));
        assert_eq!(input_size(3, 3, 0), (32, 32));
    }

    fn map_with(rects: &[(usize, usize, usize, usize)], width: usize, height: usize) -> Vec<f32> {
        let mut prob = vec![0.05f32; width * height];
        for &(x0, y0, x1, y1) in rects {
            for y in y0..=y1 {
                for x in x0..=x1 {
                    prob[y * width + x] = 0.9;
                }
            }
        }
        prob
    }

    #[test]
    fn two_lines_give_two_grown_boxes_in_reading_order() {
        let (w, h) = (100, 60);
        // The second line is found first in raster order but its box is lower.
        let prob = map_with(
            &[(60, 10, 90, 17), (10, 30, 80, 39), (10, 11, 40, 18)],
            w,
            h,
        );
        let boxes = boxes_from_map(&prob, w, h, w, h, &DbOptions::default());
        assert_eq!(boxes.len(), 3);
        // The dilated region of the first box spans x 10..=41, y 11..=19: 31 x 8, grown by
        // 31 * 8 * 1.6 / 78 = 5.09 on each side, rounded to whole pixels.
        assert_eq!(
            boxes[0].corners,
            [[5.0, 6.0], [46.0, 6.0], [46.0, 24.0], [5.0, 24.0]]
        );
        // The score is the map's mean over the ungrown box, edges included: 31 x 8 pixels of
        // text at 0.9 and the dilated row and column at 0.05.
        let want = (248.0 * 0.9 + 40.0 * 0.05) / 288.0;
        assert!(
            (boxes[0].score - want).abs() < 1e-5,
            "{} vs {want}",
            boxes[0].score
        );
        assert!(
            boxes[1].corners[0][0] > 50.0,
            "same line, to the right: {:?}",
            boxes[1]
        );
        assert!(boxes[2].corners[0][1] > 20.0);
    }

    #[test]
    fn boxes_scale_to_the_image_and_noise_is_dropped() {
        let (w, h) = (64, 32);
        // A line and two specks (too thin to be text).
        let prob = map_with(&[(8, 8, 55, 19), (2, 2, 2, 2), (60, 28, 60, 29)], w, h);
        let boxes = boxes_from_map(&prob, w, h, w / 2, h / 2, &DbOptions::default());
        assert_eq!(boxes.len(), 1);
        for p in boxes[0].corners {
            assert!(
                p[0] <= 31.0 && p[1] <= 15.0,
                "{p:?} outside the half-size image"
            );
        }
    }

    #[test]
    fn low_scores_and_empty_maps_give_no_boxes() {
        let (w, h) = (50, 30);
        let mut prob = map_with(&[(5, 5, 40, 20)], w, h);
        for p in prob.iter_mut().filter(|p| **p > 0.5) {
            *p = 0.4; // above the pixel threshold, below the box threshold
        }
        assert!(boxes_from_map(&prob, w, h, w, h, &DbOptions::default()).is_empty());
        assert!(boxes_from_map(&vec![0.0; w * h], w, h, w, h, &DbOptions::default()).is_empty());
    }

    #[test]
    fn a_ring_has_an_outer_border_and_a_hole() {
        let (w, h) = (12, 12);
        let mut mask = vec![false; w * h];
        for y in 2..10 {
            for x in 2..10 {
                mask[y * w + x] = !(4..8).contains(&x) || !(4..8).contains(&y);
            }
        }
        let found = regions(&mask, w, h);
        assert_eq!(found.len(), 2);
        let sizes: Vec<f64> = found
            .iter()
            .map(|r| geometry::min_area_rect(r).sides[0])
            .collect();
        assert!(sizes.contains(&7.0), "outer border spans 2..=9: {sizes:?}");
        assert!(sizes.contains(&5.0), "hole border spans 3..=8: {sizes:?}");
    }
}
