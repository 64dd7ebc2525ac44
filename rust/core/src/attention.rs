//! Row-exact attention: every query row of a call attends over the keys its bias row shows
//! (bias exactly 0; anything else hides the key), computed alone, so a row's result is the
//! same bits whatever other rows share its call. This is the arithmetic a depth decoder's
//! verify call needs to keep the autoregressive law: a tree node scored in a call of many rows
//! must be scored exactly as its own one-row AR step would be.
//!
//! Layouts (the "placed" depth graphs', position-major, docs/graphs.md): queries
//! `[Q, heads · hd]` (already scaled by 1/√hd), this call's keys and values
//! `[Q, 2 · kv_heads · hd]` (keys' heads, then values'), the past `[P, 2 · kv_heads · hd]`,
//! the bias `[Q, P + Q]` (columns: the past, then this call's rows). Query head h reads key
//! head h / (heads / kv_heads).

use crate::error::{ensure, Result};

/// Sizes of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub rows: usize,
    pub past: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl AttentionShape {
    fn check(
        &self,
        q: &[f32],
        new_kv: &[f32],
        past: &[f32],
        bias: &[f32],
        out: &[f32],
    ) -> Result<()> {
        let s = *self;
        ensure(
            s.heads > 0 && s.kv_heads > 0 && s.head_dim > 0,
            "heads",
            || format!("heads, kv_heads and head_dim must be positive, got {s:?}"),
        )?;
        ensure(
            s.heads.checked_rem(s.kv_heads) == Some(0),
            "kv_heads",
            || format!("must divide heads ({}), got {}", s.heads, s.kv_heads),
        )?;
        let (wq, wkv) = (s.heads * s.head_dim, 2 * s.kv_heads * s.head_dim);
        for (name, got, want) in [
            ("q", q.len(), s.rows * wq),
            ("new_kv", new_kv.len(), s.rows * wkv),
            ("past", past.len(), s.past * wkv),
            ("bias", bias.len(), s.rows * (s.past + s.rows)),
            ("out", out.len(), s.rows * wq),
        ] {
            ensure(got == want, name, || {
                format!("expected {want} values for {s:?}, got {got}")
            })?;
        }
        Ok(())
    }
}

/// Dot product with eight lane accumulators: vectorised, and in one fixed order.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// One query row over its visible keys (`keys[j]` = that key's joined K/V row).
#[inline(always)]
fn attend_row(q: &[f32], keys: &[&[f32]], s: &AttentionShape, scores: &mut [f32], out: &mut [f32]) {
    let (hd, group) = (s.head_dim, s.heads / s.kv_heads);
    let values_at = s.kv_heads * hd;
    out.fill(0.0);
    if keys.is_empty() {
        return; // nothing visible: zeros (a depth decoder's row always sees itself)
    }
    for h in 0..s.heads {
        let (qh, kvh) = (&q[h * hd..(h + 1) * hd], h / group);
        let mut peak = f32::NEG_INFINITY;
        for (sc, k) in scores.iter_mut().zip(keys) {
            *sc = dot(qh, &k[kvh * hd..(kvh + 1) * hd]);
            peak = peak.max(*sc);
        }
        let mut total = 0.0f32;
        for sc in scores[..keys.len()].iter_mut() {
            *sc = (*sc - peak).exp();
            total += *sc;
        }
        let oh = &mut out[h * hd..(h + 1) * hd];
        for (&p, k) in scores.iter().zip(keys) {
            let w = p / total;
            let v = &k[values_at + kvh * hd..values_at + (kvh + 1) * hd];
            for (o, &x) in oh.iter_mut().zip(v) {
                *o += w * x;
            }
        }
    }
}

#[inline(always)]
fn attend_all(
    q: &[f32],
    new_kv: &[f32],
    past: &[f32],
    bias: &[f32],
    s: AttentionShape,
    out: &mut [f32],
) {
    let (wq, wkv, cols) = (
        s.heads * s.head_dim,
        2 * s.kv_heads * s.head_dim,
        s.past + s.rows,
    );
    let mut keys: Vec<&[f32]> = Vec::with_capacity(cols);
    let mut scores = vec![0.0f32; cols];
    for r in 0..s.rows {
        keys.clear();
        for (c, &b) in bias[r * cols..(r + 1) * cols].iter().enumerate() {
            if b == 0.0 {
                keys.push(if c < s.past {
                    &past[c * wkv..(c + 1) * wkv]
                } else {
                    &new_kv[(c - s.past) * wkv..(c - s.past + 1) * wkv]
                });
            }
        }
        attend_row(
            &q[r * wq..(r + 1) * wq],
            &keys,
            &s,
            &mut scores,
            &mut out[r * wq..(r + 1) * wq],
        );
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_avx2(
    q: &[f32],
    new_kv: &[f32],
    past: &[f32],
    bias: &[f32],
    s: AttentionShape,
    out: &mut [f32],
) {
    attend_all(q, new_kv, past, bias, s, out)
}

/// Attention of every query row over the keys its bias row shows (module doc), into `out`
/// `[Q, heads · hd]`. A row computes the same bits alone or among others on one machine.
pub fn placed_attention(
    q: &[f32],
    new_kv: &[f32],
    past: &[f32],
    bias: &[f32],
    shape: AttentionShape,
    out: &mut [f32],
) -> Result<()> {
    shape.check(q, new_kv, past, bias, out)?;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features the function was compiled for.
        unsafe { attend_avx2(q, new_kv, past, bias, shape, out) };
        return Ok(());
    }
    attend_all(q, new_kv, past, bias, shape, out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    const SHAPE: AttentionShape = AttentionShape {
        rows: 4,
        past: 3,
        heads: 4,
        kv_heads: 2,
        head_dim: 12,
    };

    /// Double-precision attention of row r over the columns `cols` shows.
    fn reference(
        q: &[f32],
        kv: &[f32],
        past: &[f32],
        r: usize,
        cols: &[usize],
        s: AttentionShape,
    ) -> Vec<f64> {
        let (hd, wkv) = (s.head_dim, 2 * s.kv_heads * s.head_dim);
        let key = |c: usize| {
            if c < s.past {
                &past[c * wkv..]
            } else {
                &kv[(c - s.past) * wkv..]
            }
        };
        let mut out = vec![0.0f64; s.heads * hd];
        for h in 0..s.heads {
            let g = h / (s.heads / s.kv_heads);
            let qh = &q[r * s.heads * hd + h * hd..][..hd];
            let sc: Vec<f64> = cols
                .iter()
                .map(|&c| {
                    (0..hd)
                        .map(|d| qh[d] as f64 * key(c)[g * hd + d] as f64)
                        .sum()
                })
                .collect();
            let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
            let t: f64 = e.iter().sum();
            for (j, &c) in cols.iter().enumerate() {
                for d in 0..hd {
                    out[h * hd + d] += e[j] / t * key(c)[(s.kv_heads + g) * hd + d] as f64;
                }
            }
        }
        out
    }

    #[test]
    fn rows_match_double_precision_and_are_the_same_bits_alone() {
        let s = SHAPE;
        let (wq, wkv, cols) = (
            s.heads * s.head_dim,
            2 * s.kv_heads * s.head_dim,
            s.past + s.rows,
        );
        let (q, kv, past) = (
            noise(s.rows * wq, 1),
            noise(s.rows * wkv, 2),
            noise(s.past * wkv, 3),
        );
        // a tree: row 0 the root (sees the past), rows 1 and 2 its children, row 3 row 1's child
        let parents = [None, Some(0), Some(0), Some(1)];
        let mut bias = vec![f32::NEG_INFINITY; s.rows * cols];
        let mut visible: Vec<Vec<usize>> = vec![];
        for r in 0..s.rows {
            let mut v: Vec<usize> = (0..s.past).collect();
            let mut chain = vec![r];
            while let Some(p) = parents[*chain.last().unwrap()] {
                chain.push(p);
            }
            v.extend(chain.iter().rev().map(|&n| s.past + n));
            for &c in &v {
                bias[r * cols + c] = 0.0;
            }
            visible.push(v);
        }
        let mut out = vec![0.0; s.rows * wq];
        placed_attention(&q, &kv, &past, &bias, s, &mut out).unwrap();
        for r in 0..s.rows {
            let want = reference(&q, &kv, &past, r, &visible[r], s);
            for (o, w) in out[r * wq..(r + 1) * wq].iter().zip(&want) {
                assert!((*o as f64 - w).abs() < 1e-6, "row {r}: {o} vs {w}");
            }
            // alone: the row's own keys moved to the front of a one-row call
            let mut past1 = past.clone();
            for &c in &visible[r][s.past..visible[r].len() - 1] {
                past1.extend_from_slice(&kv[(c - s.past) * wkv..(c - s.past + 1) * wkv]);
            }
            let p1 = past1.len() / wkv;
            let one = AttentionShape {
                rows: 1,
                past: p1,
                ..s
            };
            let mut b1 = vec![0.0f32; p1 + 1];
            b1[p1] = 0.0;
            let mut o1 = vec![0.0; wq];
            placed_attention(
                &q[r * wq..(r + 1) * wq],
                &kv[r * wkv..(r + 1) * wkv],
                &past1,
                &b1,
                one,
                &mut o1,
            )
            .unwrap();
            assert_eq!(&o1[..], &out[r * wq..(r + 1) * wq], "row {r} alone");
        }
        // the broken variant: a hidden key made visible changes the row
        bias[cols + s.past + 2] = 0.0;
        let mut broken = vec![0.0; s.rows * wq];
        placed_attention(&q, &kv, &past, &bias, s, &mut broken).unwrap();
        assert_ne!(&broken[wq..2 * wq], &out[wq..2 * wq]);
    }

    #[test]
    fn bad_sizes_name_the_argument() {
        let s = SHAPE;
        let (wq, wkv) = (s.heads * s.head_dim, 2 * s.kv_heads * s.head_dim);
        let (q, kv, past) = (
            vec![0.0; s.rows * wq],
            vec![0.0; s.rows * wkv],
            vec![0.0; s.past * wkv],
        );
        let bias = vec![0.0; s.rows * (s.past + s.rows)];
        let mut out = vec![0.0; s.rows * wq];
        let e = placed_attention(&q, &kv, &past[1..], &bias, s, &mut out).unwrap_err();
        assert_eq!(e.arg, "past");
        let e = placed_attention(&q, &kv, &past, &bias[1..], s, &mut out).unwrap_err();
        assert_eq!(e.arg, "bias");
        let e = placed_attention(
            &q,
            &kv,
            &past,
            &bias,
            AttentionShape { kv_heads: 3, ..s },
            &mut out,
        )
        .unwrap_err();
        assert_eq!(e.arg, "kv_heads");
    }
}
