//! Plane geometry for text boxes: convex hulls, the minimum-area rotated rectangle, polygon
//! offsetting with round joins, and the homography between two quadrilaterals.

/// A point `[x, y]` in pixels.
pub type Point = [f64; 2];

/// A quadrilateral's corners.
pub type Quad = [Point; 4];

fn cross(o: Point, a: Point, b: Point) -> f64 {
    (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])
}

/// The convex hull, counter-clockwise in a y-down frame, without collinear points (Andrew's
/// monotone chain). Fewer than three distinct points come back as they are, deduplicated.
pub fn convex_hull(points: &[Point]) -> Vec<Point> {
    let mut pts = points.to_vec();
    pts.sort_by(|a, b| a[0].total_cmp(&b[0]).then(a[1].total_cmp(&b[1])));
    pts.dedup();
    if pts.len() < 3 {
        return pts;
    }
    let mut hull: Vec<Point> = Vec::with_capacity(2 * pts.len());
    for pass in 0..2 {
        let start = hull.len();
        let iter: Box<dyn Iterator<Item = &Point>> = if pass == 0 {
            Box::new(pts.iter())
        } else {
            Box::new(pts.iter().rev())
        };
        for &p in iter {
            while hull.len() >= start + 2
                && cross(hull[hull.len() - 2], hull[hull.len() - 1], p) <= 0.0
            {
                hull.pop();
            }
            hull.push(p);
        }
        // The last point of each chain is the first of the other.
        hull.pop();
    }
    hull
}

/// A rotated rectangle: its corners in order around it, and its two side lengths.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RotatedRect {
    pub corners: Quad,
    pub sides: [f64; 2],
}

impl RotatedRect {
    /// The shorter side.
    pub fn short_side(&self) -> f64 {
        self.sides[0].min(self.sides[1])
    }
}

/// The smallest-area rectangle holding every point (OpenCV's `minAreaRect`). One side of the
/// optimum lies along a hull edge, so each edge direction is tried; hulls of text regions
/// have tens of points, so the quadratic search costs nothing next to the network.
pub fn min_area_rect(points: &[Point]) -> RotatedRect {
    let hull = convex_hull(points);
    match hull.len() {
        0 => RotatedRect {
            corners: [[0.0; 2]; 4],
            sides: [0.0; 2],
        },
        1 => RotatedRect {
            corners: [hull[0]; 4],
            sides: [0.0; 2],
        },
        _ => {
            let mut best: Option<(f64, RotatedRect)> = None;
            for i in 0..hull.len() {
                let (a, b) = (hull[i], hull[(i + 1) % hull.len()]);
                let len = ((b[0] - a[0]).powi(2) + (b[1] - a[1]).powi(2)).sqrt();
                if len == 0.0 {
                    continue;
                }
                let u = [(b[0] - a[0]) / len, (b[1] - a[1]) / len];
                let v = [-u[1], u[0]];
                let (mut lo_u, mut hi_u, mut lo_v, mut hi_v) =
                    (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
                for p in &hull {
                    let (du, dv) = (p[0] - a[0], p[1] - a[1]);
                    let (pu, pv) = (du * u[0] + dv * u[1], du * v[0] + dv * v[1]);
                    lo_u = lo_u.min(pu);
                    hi_u = hi_u.max(pu);
                    lo_v = lo_v.min(pv);
                    hi_v = hi_v.max(pv);
                }
                let area = (hi_u - lo_u) * (hi_v - lo_v);
                if best.as_ref().is_none_or(|(b, _)| area < *b - 1e-9) {
                    let at = |su: f64, sv: f64| {
                        [a[0] + su * u[0] + sv * v[0], a[1] + su * u[1] + sv * v[1]]
                    };
                    best = Some((
                        area,
                        RotatedRect {
                            corners: [
                                at(lo_u, lo_v),
                                at(hi_u, lo_v),
                                at(hi_u, hi_v),
                                at(lo_u, hi_v),
                            ],
                            sides: [hi_u - lo_u, hi_v - lo_v],
                        },
                    ));
                }
            }
            best.map(|(_, r)| r).unwrap_or(RotatedRect {
                corners: [hull[0]; 4],
                sides: [0.0; 2],
            })
        }
    }
}

/// Orders a rectangle's corners as PP-OCR's detector does: the two leftmost (by x), the upper
/// of them first; then the two rightmost, the upper of them second and the lower third.
/// The result runs top-left, top-right, bottom-right, bottom-left for upright text.
pub fn order_box(corners: &Quad) -> Quad {
    let mut pts = *corners;
    // Stable, like Python's `sorted`.
    pts.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let (first, fourth) = if pts[1][1] > pts[0][1] {
        (0, 1)
    } else {
        (1, 0)
    };
    let (second, third) = if pts[3][1] > pts[2][1] {
        (2, 3)
    } else {
        (3, 2)
    };
    [pts[first], pts[second], pts[third], pts[fourth]]
}

/// Orders four corners clockwise from the top-left (imutils' `order_points`): by x into a left
/// and a right pair, each pair by y.
pub fn order_clockwise(corners: &Quad) -> Quad {
    let mut pts = *corners;
    pts.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let (mut left, mut right) = ([pts[0], pts[1]], [pts[2], pts[3]]);
    left.sort_by(|a, b| a[1].total_cmp(&b[1]));
    right.sort_by(|a, b| a[1].total_cmp(&b[1]));
    [left[0], right[0], right[1], left[1]]
}

/// The polygon's area (absolute, shoelace formula).
pub fn area(poly: &[Point]) -> f64 {
    let n = poly.len();
    let twice: f64 = (0..n)
        .map(|i| {
            let (a, b) = (poly[i], poly[(i + 1) % n]);
            a[0] * b[1] - b[0] * a[1]
        })
        .sum();
    twice.abs() / 2.0
}

/// The closed polygon's perimeter.
pub fn perimeter(poly: &[Point]) -> f64 {
    let n = poly.len();
    (0..n)
        .map(|i| {
            let (a, b) = (poly[i], poly[(i + 1) % n]);
            ((b[0] - a[0]).powi(2) + (b[1] - a[1]).powi(2)).sqrt()
        })
        .sum()
}

/// Whether `p` lies inside the convex polygon or on its boundary.
pub fn inside_convex(poly: &[Point], p: Point) -> bool {
    let n = poly.len();
    let (mut pos, mut neg) = (false, false);
    for i in 0..n {
        let c = cross(poly[i], poly[(i + 1) % n], p);
        pos |= c > 1e-9;
        neg |= c < -1e-9;
    }
    !(pos && neg)
}

/// Grows a convex polygon outward by `delta` with round joins, on the integer grid, as the
/// Clipper library does for DB's "unclip": corners are truncated to integers first, arcs are
/// approximated within a quarter pixel, and output points are rounded.
pub fn offset_round(poly: &[Point], delta: f64) -> Vec<Point> {
    let pts: Vec<Point> = poly.iter().map(|p| [p[0].trunc(), p[1].trunc()]).collect();
    let n = pts.len();
    if n == 0 || delta <= 0.0 {
        return pts;
    }
    // Walk the polygon so that the outward normal of edge a -> b is (dy, -dx).
    let signed: f64 = (0..n)
        .map(|i| pts[i][0] * pts[(i + 1) % n][1] - pts[(i + 1) % n][0] * pts[i][1])
        .sum();
    let pts: Vec<Point> = if signed < 0.0 {
        pts.into_iter().rev().collect()
    } else {
        pts
    };
    let normal = |a: Point, b: Point| {
        let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
        let len = (dx * dx + dy * dy).sqrt();
        if len == 0.0 {
            [0.0, 0.0]
        } else {
            [dy / len, -dx / len]
        }
    };
    // Clipper's arc step: at most `ARC_TOLERANCE` between an arc and its chords.
    const ARC_TOLERANCE: f64 = 0.25;
    let steps_per_turn = (std::f64::consts::PI / (1.0 - ARC_TOLERANCE / delta).acos())
        .min(delta * std::f64::consts::PI);
    let round = |v: f64| {
        if v < 0.0 {
            (v - 0.5).trunc()
        } else {
            (v + 0.5).trunc()
        }
    };
    let mut out = Vec::new();
    for i in 0..n {
        let prev = pts[(i + n - 1) % n];
        let (p, next) = (pts[i], pts[(i + 1) % n]);
        let (n0, n1) = (normal(prev, p), normal(p, next));
        let a0 = n0[1].atan2(n0[0]);
        let mut sweep = n1[1].atan2(n1[0]) - a0;
        while sweep < 0.0 {
            sweep += 2.0 * std::f64::consts::PI;
        }
        if sweep > std::f64::consts::PI {
            sweep -= 2.0 * std::f64::consts::PI;
        }
        let steps =
            ((steps_per_turn * sweep.abs() / (2.0 * std::f64::consts::PI)).round() as usize).max(1);
        for s in 0..=steps {
            let a = a0 + sweep * s as f64 / steps as f64;
            out.push([round(p[0] + delta * a.cos()), round(p[1] + delta * a.sin())]);
        }
    }
    out
}

/// The homography taking `from[i]` to `to[i]` (OpenCV's `getPerspectiveTransform`), row-major
/// with the last entry 1, or `None` when the points are degenerate.
pub fn perspective_transform(from: &Quad, to: &Quad) -> Option<[f64; 9]> {
    // Eight equations in the eight unknowns h0..h7 of
    // u = (h0 x + h1 y + h2) / (h6 x + h7 y + 1), v = (h3 x + h4 y + h5) / (h6 x + h7 y + 1).
    let mut a = [[0f64; 9]; 8];
    for i in 0..4 {
        let ([x, y], [u, v]) = (from[i], to[i]);
        a[i] = [x, y, 1.0, 0.0, 0.0, 0.0, -x * u, -y * u, u];
        a[i + 4] = [0.0, 0.0, 0.0, x, y, 1.0, -x * v, -y * v, v];
    }
    let h = solve(&mut a)?;
    Some([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], 1.0])
}

/// Inverts a 3x3 matrix, or `None` when it is singular.
pub fn invert3(m: &[f64; 9]) -> Option<[f64; 9]> {
    let c = |r: usize, k: usize| m[r * 3 + k];
    let cof = [
        c(1, 1) * c(2, 2) - c(1, 2) * c(2, 1),
        c(0, 2) * c(2, 1) - c(0, 1) * c(2, 2),
        c(0, 1) * c(1, 2) - c(0, 2) * c(1, 1),
        c(1, 2) * c(2, 0) - c(1, 0) * c(2, 2),
        c(0, 0) * c(2, 2) - c(0, 2) * c(2, 0),
        c(0, 2) * c(1, 0) - c(0, 0) * c(1, 2),
        c(1, 0) * c(2, 1) - c(1, 1) * c(2, 0),
        c(0, 1) * c(2, 0) - c(0, 0) * c(2, 1),
        c(0, 0) * c(1, 1) - c(0, 1) * c(1, 0),
    ];
    let det = c(0, 0) * cof[0] + c(0, 1) * cof[3] + c(0, 2) * cof[6];
    if det.abs() < 1e-12 {
        return None;
    }
    Some(cof.map(|v| v / det))
}

/// Gaussian elimination with partial pivoting on an augmented 8x9 system.
fn solve(a: &mut [[f64; 9]; 8]) -> Option<[f64; 8]> {
    for col in 0..8 {
        let pivot = (col..8).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col];
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                for (v, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                    *v -= f * p;
                }
            }
        }
    }
    let mut x = [0f64; 8];
    for (i, v) in x.iter_mut().enumerate() {
        *v = a[i][8] / a[i][i];
    }
    Some(x)
}

/// Applies a homography to a point.
pub fn apply(m: &[f64; 9], p: Point) -> Point {
    let w = m[6] * p[0] + m[7] * p[1] + m[8];
    [
        (m[0] * p[0] + m[1] * p[1] + m[2]) / w,
        (m[3] * p[0] + m[4] * p[1] + m[5]) / w,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random sequence (xorshift), so the tests need no crate.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// The naive reference: the bounding rectangle at every angle in 0.01° steps (so it can
    /// only overestimate the optimum, by well under 1%).
    fn brute_force_area(points: &[Point]) -> f64 {
        (0..9000)
            .map(|i| {
                let t = (i as f64 / 100.0).to_radians();
                let (c, s) = (t.cos(), t.sin());
                let us = points.iter().map(|p| p[0] * c + p[1] * s);
                let vs = points.iter().map(|p| -p[0] * s + p[1] * c);
                let span = |it: &mut dyn Iterator<Item = f64>| {
                    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
                    for v in it {
                        lo = lo.min(v);
                        hi = hi.max(v);
                    }
                    hi - lo
                };
                span(&mut us.clone()) * span(&mut vs.clone())
            })
            .fold(f64::MAX, f64::min)
    }

    #[test]
    fn min_area_rect_matches_a_brute_force_search_and_holds_every_point() {
        let mut rng = Rng(0x9e3779b97f4a7c15);
        for case in 0..40 {
            let n = 3 + case % 20;
            // Points around a rotated, elongated blob, like a line of text.
            let (t, len) = (rng.next() * 3.0, 10.0 + rng.next() * 60.0);
            let points: Vec<Point> = (0..n)
                .map(|_| {
                    let (u, v) = (rng.next() * len, rng.next() * 8.0);
                    [
                        (u * t.cos() - v * t.sin()).round() + 50.0,
                        (u * t.sin() + v * t.cos()).round() + 50.0,
                    ]
                })
                .collect();
            let r = min_area_rect(&points);
            let got = r.sides[0] * r.sides[1];
            let want = brute_force_area(&points);
            assert!(
                got <= want + 1e-6 && got >= want * 0.99,
                "case {case}: {got} vs {want}"
            );
            for p in &points {
                assert!(
                    inside_convex(&r.corners, *p),
                    "case {case}: {p:?} outside {:?}",
                    r.corners
                );
            }
        }
    }

    #[test]
    fn axis_aligned_pixels_give_their_bounding_box() {
        let points: Vec<Point> = (10..=50)
            .flat_map(|x| (5..=15).map(move |y| [x as f64, y as f64]))
            .collect();
        let r = min_area_rect(&points);
        let mut sides = r.sides;
        sides.sort_by(f64::total_cmp);
        assert_eq!(sides, [10.0, 40.0]);
        let b = order_box(&r.corners);
        assert_eq!(b, [[10.0, 5.0], [50.0, 5.0], [50.0, 15.0], [10.0, 15.0]]);
    }

    #[test]
    fn degenerate_point_sets_do_not_panic() {
        assert_eq!(min_area_rect(&[]).short_side(), 0.0);
        assert_eq!(min_area_rect(&[[3.0, 4.0]]).short_side(), 0.0);
        let line = min_area_rect(&[[0.0, 0.0], [4.0, 3.0], [8.0, 6.0]]);
        assert!(line.short_side() < 1e-9);
        assert!((line.sides[0].max(line.sides[1]) - 10.0).abs() < 1e-9);
    }

    #[test]
    fn round_offset_of_a_rectangle_grows_each_side_by_delta() {
        // As pyclipper does it: corners truncated to integers first.
        let rect = [[10.9, 5.9], [50.9, 5.9], [50.9, 15.9], [10.9, 15.9]];
        let grown = offset_round(&rect, 4.0);
        let xs = grown.iter().map(|p| p[0]);
        let ys = grown.iter().map(|p| p[1]);
        assert_eq!(xs.clone().fold(f64::MAX, f64::min), 6.0);
        assert_eq!(xs.fold(f64::MIN, f64::max), 54.0);
        assert_eq!(ys.clone().fold(f64::MAX, f64::min), 1.0);
        assert_eq!(ys.fold(f64::MIN, f64::max), 19.0);
        let r = min_area_rect(&grown);
        let mut sides = r.sides;
        sides.sort_by(f64::total_cmp);
        assert_eq!(sides, [18.0, 48.0]);
        // Every arc point is within half a pixel (the rounding) of distance delta from the box.
        for p in &grown {
            let dx = (6.0 + 4.0 - p[0]).max(p[0] - 50.0).max(0.0);
            let dy = (1.0 + 4.0 - p[1]).max(p[1] - 15.0).max(0.0);
            assert!((dx.hypot(dy) - 4.0).abs() <= 0.75, "{p:?}");
        }
    }

    #[test]
    fn orderings_follow_the_detector() {
        let tilted = [[50.0, 10.0], [10.0, 14.0], [11.0, 24.0], [51.0, 20.0]];
        assert_eq!(
            order_box(&tilted),
            [[10.0, 14.0], [50.0, 10.0], [51.0, 20.0], [11.0, 24.0]]
        );
        assert_eq!(
            order_clockwise(&tilted),
            [[10.0, 14.0], [50.0, 10.0], [51.0, 20.0], [11.0, 24.0]]
        );
    }

    #[test]
    fn perspective_transform_maps_the_corners_and_inverts() {
        let from = [[12.0, 7.0], [90.0, 11.0], [88.0, 40.0], [10.0, 33.0]];
        let to = [[0.0, 0.0], [78.0, 0.0], [78.0, 30.0], [0.0, 30.0]];
        let m = perspective_transform(&from, &to).unwrap();
        for (f, t) in from.iter().zip(&to) {
            let p = apply(&m, *f);
            assert!((p[0] - t[0]).abs() < 1e-9 && (p[1] - t[1]).abs() < 1e-9);
        }
        let inv = invert3(&m).unwrap();
        for (f, t) in from.iter().zip(&to) {
            let p = apply(&inv, *t);
            assert!((p[0] - f[0]).abs() < 1e-9 && (p[1] - f[1]).abs() < 1e-9);
        }
        let collapsed = [[0.0, 0.0]; 4];
        assert!(perspective_transform(&collapsed, &to).is_none());
    }

    #[test]
    fn area_perimeter_and_inside() {
        let sq = [[0.0, 0.0], [4.0, 0.0], [4.0, 3.0], [0.0, 3.0]];
        assert_eq!(area(&sq), 12.0);
        assert_eq!(perimeter(&sq), 14.0);
        assert!(inside_convex(&sq, [4.0, 3.0]));
        assert!(inside_convex(&sq, [2.0, 1.0]));
        assert!(!inside_convex(&sq, [4.5, 1.0]));
    }
}
