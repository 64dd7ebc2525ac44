//! FSQ codes and factorized frames: mixed-radix packing of FSQ channels, C independent
//! categorical heads sampled side by side, and a Bernoulli stop head.

use rayon::prelude::*;

use crate::error::{ensure, Error, Result};
use crate::rng::{slot, Generator};
use crate::warp::{argmax, row_check, warp_row, Dist, SamplingParams, Scratch};

/// Largest code space `fsq_pack` accepts (Π levels).
pub const MAX_CODES: u64 = 1 << 40;

/// Validates `levels` (each >= 2, product <= 2^40) and returns the product.
pub fn fsq_codebook_size(levels: &[u32]) -> Result<u64> {
    ensure(!levels.is_empty(), "levels", || {
        "must hold at least one level".into()
    })?;
    let mut prod = 1u64;
    for (i, &l) in levels.iter().enumerate() {
        ensure(l >= 2, "levels", || {
            format!("level {i} is {l}; every level must be >= 2")
        })?;
        prod = prod.saturating_mul(l as u64);
        ensure(prod <= MAX_CODES, "levels", || {
            format!("the product of levels exceeds 2^40 ({levels:?})")
        })?;
    }
    Ok(prod)
}

/// Packs channels [..., L] into one code per frame: mixed radix, first level most significant
/// (levels [8, 7, 6, 6]: code = ((c0·7 + c1)·6 + c2)·6 + c3, in [0, 2016)).
pub fn fsq_pack(channels: &[i64], levels: &[u32]) -> Result<Vec<i64>> {
    fsq_codebook_size(levels)?;
    let l = levels.len();
    ensure(channels.len().checked_rem(l) == Some(0), "channels", || {
        format!(
            "length {} is not a multiple of L = {l} (expected shape [..., {l}])",
            channels.len()
        )
    })?;
    let mut out = Vec::with_capacity(channels.len() / l);
    for (f, frame) in channels.chunks_exact(l).enumerate() {
        let mut code = 0i64;
        for (i, (&c, &lv)) in frame.iter().zip(levels).enumerate() {
            if !(0..lv as i64).contains(&c) {
                return Err(Error::new(
                    "channels",
                    format!("frame {f}, channel {i} is {c}, outside [0, {lv})"),
                ));
            }
            code = code * lv as i64 + c;
        }
        out.push(code);
    }
    Ok(out)
}

/// Inverse of [`fsq_pack`]: codes [...] in [0, Π levels) → channels [..., L].
pub fn fsq_unpack(packed: &[i64], levels: &[u32]) -> Result<Vec<i64>> {
    let n = fsq_codebook_size(levels)? as i64;
    let l = levels.len();
    let mut out = vec![0i64; packed.len() * l];
    for (i, (&code, frame)) in packed.iter().zip(out.chunks_exact_mut(l)).enumerate() {
        ensure((0..n).contains(&code), "packed", || {
            format!("entry {i} is {code}, outside [0, {n})")
        })?;
        let mut rest = code;
        for (c, &lv) in frame.iter_mut().zip(levels).rev() {
            *c = rest % lv as i64;
            rest /= lv as i64;
        }
    }
    Ok(out)
}

/// One sample per head per row: `logits` [rows, Σ head_sizes] holds C = head_sizes.len()
/// independent heads side by side; returns token ids within each head, [rows, C] row-major.
/// Each head slice is warped with `params` and sampled with draw (row·C + head, EMIT) of one
/// generator step; greedy (temperature 0) takes each head's argmax and draws nothing.
pub fn sample_factorized(
    logits: &[f32],
    head_sizes: &[usize],
    params: &SamplingParams,
    rng: &mut Generator,
) -> Result<Vec<i32>> {
    ensure(!head_sizes.is_empty(), "head_sizes", || {
        "must hold at least one head".into()
    })?;
    if let Some(h) = head_sizes.iter().position(|&s| s == 0) {
        return Err(Error::new(
            "head_sizes",
            format!("head {h} has size 0; every head needs >= 1 class"),
        ));
    }
    ensure(
        head_sizes.iter().all(|&s| s <= i32::MAX as usize),
        "head_sizes",
        || "head sizes must fit in int32".into(),
    )?;
    let width: usize = head_sizes.iter().sum();
    let c = head_sizes.len();
    ensure(logits.len().checked_rem(width) == Some(0), "logits", || {
        format!(
            "length {} is not a multiple of Σ head_sizes = {width} (expected shape [..., {width}])",
            logits.len()
        )
    })?;
    let rows = logits.len() / width;
    ensure(
        rows.checked_mul(c).is_some_and(|n| n <= u32::MAX as usize),
        "logits",
        || "too many rows × heads for one call".into(),
    )?;
    let mut offsets = Vec::with_capacity(c);
    let mut o = 0;
    for &s in head_sizes {
        offsets.push(o);
        o += s;
    }
    for (r, row) in logits.chunks_exact(width).enumerate() {
        for (h, (&off, &s)) in offsets.iter().zip(head_sizes).enumerate() {
            let (m, ok) = row_check(&row[off..off + s]);
            if !ok {
                return Err(Error::new(
                    "logits",
                    format!("row {r}, head {h} contains NaN or +inf"),
                ));
            }
            if m == f32::NEG_INFINITY {
                return Err(Error::new(
                    "logits",
                    format!("row {r}, head {h} has no finite entry"),
                ));
            }
        }
    }
    let mut out = vec![0i32; rows * c];
    if params.is_greedy() {
        for (row, o) in logits.chunks_exact(width).zip(out.chunks_exact_mut(c)) {
            for ((&off, &s), oh) in offsets.iter().zip(head_sizes).zip(o.iter_mut()) {
                *oh = argmax(&row[off..off + s]) as i32;
            }
        }
        return Ok(out);
    }
    let step = rng.next_step();
    let one = |(scratch, d): &mut (Scratch, Dist), (r, (row, o)): (usize, (&[f32], &mut [i32]))| {
        for (h, ((&off, &s), oh)) in offsets.iter().zip(head_sizes).zip(o.iter_mut()).enumerate() {
            warp_row(&row[off..off + s], params, scratch, d);
            *oh = d.sample(step.uniform((r * c + h) as u32, slot::EMIT)) as i32;
        }
    };
    if rows > 1 && logits.len() >= 1 << 16 {
        logits
            .par_chunks_exact(width)
            .zip(out.par_chunks_exact_mut(c))
            .enumerate()
            .for_each_init(|| (Scratch::default(), Dist::default()), one);
    } else {
        let mut w = (Scratch::default(), Dist::default());
        for item in logits
            .chunks_exact(width)
            .zip(out.chunks_exact_mut(c))
            .enumerate()
        {
            one(&mut w, item);
        }
    }
    Ok(out)
}

/// Stop decisions: entry i is Bernoulli(sigmoid(stop_logits[i] / temperature)), drawn with
/// (i, EMIT) of one generator step. temperature 0 → logit > 0, drawing nothing. ±inf logits are
/// allowed (always / never stop); NaN is an error naming `stop_logits`.
pub fn sample_stop(
    stop_logits: &[f32],
    temperature: f32,
    rng: &mut Generator,
) -> Result<Vec<bool>> {
    ensure(
        temperature.is_finite() && temperature >= 0.0,
        "temperature",
        || format!("must be finite and >= 0 (0 = greedy), got {temperature}"),
    )?;
    if let Some(i) = stop_logits.iter().position(|x| x.is_nan()) {
        return Err(Error::new("stop_logits", format!("entry {i} is NaN")));
    }
    ensure(
        stop_logits.len() <= u32::MAX as usize,
        "stop_logits",
        || "too many entries for one call".into(),
    )?;
    if temperature == 0.0 {
        return Ok(stop_logits.iter().map(|&x| x > 0.0).collect());
    }
    let step = rng.next_step();
    let t = temperature as f64;
    Ok(stop_logits
        .iter()
        .enumerate()
        .map(|(i, &x)| step.uniform(i as u32, slot::EMIT) <= sigmoid(x as f64 / t))
        .collect())
}

/// Logistic function without overflow for large |z|.
#[inline]
fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_unpack_round_trip_nanocodec_levels() {
        let levels = [8u32, 7, 6, 6];
        assert_eq!(fsq_codebook_size(&levels).unwrap(), 2016);
        let codes: Vec<i64> = (0..2016).collect();
        let ch = fsq_unpack(&codes, &levels).unwrap();
        assert_eq!(ch.len(), 2016 * 4);
        assert_eq!(&ch[4 * 2015..], &[7, 6, 5, 5]);
        assert_eq!(&ch[4 * 7..4 * 8], &[0, 0, 1, 1]); // 7 = 1·6 + 1
        assert_eq!(fsq_pack(&ch, &levels).unwrap(), codes);
        assert_eq!(fsq_pack(&[1, 0, 0, 0], &levels).unwrap(), vec![252]);
        assert_eq!(fsq_pack(&[], &levels).unwrap(), Vec::<i64>::new());
        // Every channel tuple appears once.
        let mut seen = std::collections::HashSet::new();
        for f in ch.chunks_exact(4) {
            assert!(seen.insert(f.to_vec()));
        }
    }

    #[test]
    fn fsq_errors_name_the_argument() {
        assert_eq!(
            fsq_pack(&[8, 0, 0, 0], &[8, 7, 6, 6]).unwrap_err().arg,
            "channels"
        );
        assert_eq!(fsq_pack(&[-1, 0], &[2, 2]).unwrap_err().arg, "channels");
        assert_eq!(fsq_pack(&[0, 0, 0], &[2, 2]).unwrap_err().arg, "channels");
        assert_eq!(fsq_pack(&[0], &[1]).unwrap_err().arg, "levels");
        assert_eq!(fsq_pack(&[], &[]).unwrap_err().arg, "levels");
        assert_eq!(
            fsq_unpack(&[0], &[1 << 21, 1 << 20]).unwrap_err().arg,
            "levels"
        );
        assert!(fsq_unpack(&[(1 << 40) - 1], &[1 << 20, 1 << 20]).is_ok());
        assert_eq!(
            fsq_unpack(&[2016], &[8, 7, 6, 6]).unwrap_err().arg,
            "packed"
        );
        assert_eq!(fsq_unpack(&[-1], &[8, 7, 6, 6]).unwrap_err().arg, "packed");
    }

    #[test]
    fn factorized_heads_sample_their_own_slices() {
        let sizes = [3usize, 2, 4];
        // Row 0: point masses at 2, 0, 3; row 1: at 0, 1, 1.
        let ninf = f32::NEG_INFINITY;
        let logits = [
            ninf, ninf, 0.0, 0.0, ninf, ninf, ninf, ninf, 1.0, //
            0.0, ninf, ninf, ninf, 0.0, ninf, 3.0, ninf, ninf,
        ];
        let p = SamplingParams::new(1.0, 0, 1.0).unwrap();
        let mut g = Generator::new(1, 0);
        let out = sample_factorized(&logits, &sizes, &p, &mut g).unwrap();
        assert_eq!(out, vec![2, 0, 3, 0, 1, 1]);
        assert_eq!(g.step, 1);
        let out = sample_factorized(&logits, &sizes, &SamplingParams::greedy(), &mut g).unwrap();
        assert_eq!(out, vec![2, 0, 3, 0, 1, 1]);
        assert_eq!(g.step, 1);
    }

    #[test]
    fn factorized_law_and_draw_keys() {
        let sizes = [2usize, 3];
        let logits = [0.0f32, (3.0f32).ln(), 0.0, 0.0, (2.0f32).ln()];
        let p = SamplingParams::new(1.0, 0, 1.0).unwrap();
        let mut g = Generator::new(5, 0);
        let n = 100_000;
        let (mut a1, mut b2) = (0usize, 0usize);
        for _ in 0..n {
            let mut before = g;
            let out = sample_factorized(&logits, &sizes, &p, &mut g).unwrap();
            // Draw (row·C + head, EMIT) of this call's step.
            let step = before.next_step();
            let want_b = {
                let u = step.uniform(1, slot::EMIT);
                if u <= 0.25 {
                    0
                } else if u <= 0.5 {
                    1
                } else {
                    2
                }
            };
            assert_eq!(out[1], want_b);
            a1 += (out[0] == 1) as usize;
            b2 += (out[1] == 2) as usize;
        }
        let (fa, fb) = (a1 as f64 / n as f64, b2 as f64 / n as f64);
        assert!(
            (fa - 0.75).abs() < 0.01 && (fb - 0.5).abs() < 0.01,
            "{fa} {fb}"
        );
    }

    /// Joint counts [a * 3 + b] of `n` draws of two heads (sizes 2 and 3).
    fn joint_counts(logits: &[f32], sizes: &[usize], temperature: f32, n: usize) -> Vec<usize> {
        let p = SamplingParams::new(temperature, 0, 1.0).unwrap();
        let mut g = Generator::new(9, 0);
        let mut counts = vec![0usize; 6];
        for _ in 0..n {
            let out = sample_factorized(logits, sizes, &p, &mut g).unwrap();
            counts[(out[0] * 3 + out[1]).clamp(0, 5) as usize] += 1;
        }
        counts
    }

    #[test]
    fn factorized_joint_law_is_the_product_of_the_heads() {
        // The whole joint law (each head's law and their independence), and broken
        // samplers the same check must catch: the head boundaries shifted by one (sizes
        // [3, 2] on the same logits) and the warp's temperature ignored (T = 1 for 0.7).
        use crate::testlaw::law_ok;
        let logits = [0.0f32, (3.0f32).ln(), 0.0, 0.0, (2.0f32).ln()];
        let soft = |row: &[f32], t: f32| -> Vec<f64> {
            let e: Vec<f64> = row.iter().map(|&x| ((x / t) as f64).exp()).collect();
            let s: f64 = e.iter().sum();
            e.iter().map(|x| x / s).collect()
        };
        let t = 0.7;
        let (pa, pb) = (soft(&logits[..2], t), soft(&logits[2..], t));
        let law: Vec<f64> = pa
            .iter()
            .flat_map(|a| pb.iter().map(move |b| a * b))
            .collect();
        let n = 100_000;
        assert!(law_ok(&joint_counts(&logits, &[2, 3], t, n), &law));
        assert!(!law_ok(&joint_counts(&logits, &[3, 2], t, n), &law));
        assert!(!law_ok(&joint_counts(&logits, &[2, 3], 1.0, n), &law));
    }

    #[test]
    fn factorized_errors() {
        let p = SamplingParams::new(1.0, 0, 1.0).unwrap();
        let mut g = Generator::new(0, 0);
        let e = |l: &[f32], s: &[usize], g: &mut Generator| {
            sample_factorized(l, s, &p, g).unwrap_err().arg
        };
        assert_eq!(e(&[0.0; 4], &[], &mut g), "head_sizes");
        assert_eq!(e(&[0.0; 4], &[2, 0], &mut g), "head_sizes");
        assert_eq!(e(&[0.0; 5], &[2, 2], &mut g), "logits");
        assert_eq!(e(&[0.0, f32::NAN, 0.0, 0.0], &[2, 2], &mut g), "logits");
        assert_eq!(
            e(
                &[0.0, 0.0, f32::NEG_INFINITY, f32::NEG_INFINITY],
                &[2, 2],
                &mut g
            ),
            "logits"
        );
        assert_eq!(g.step, 0);
    }

    #[test]
    fn stop_head() {
        let mut g = Generator::new(3, 0);
        let logits = [f32::NEG_INFINITY, f32::INFINITY, 0.0, (3.0f32).ln()];
        let n = 100_000;
        let mut c = [0usize; 4];
        for _ in 0..n {
            let s = sample_stop(&logits, 1.0, &mut g).unwrap();
            for i in 0..4 {
                c[i] += s[i] as usize;
            }
        }
        assert_eq!(c[0], 0);
        assert_eq!(c[1], n);
        use crate::testlaw::law_ok;
        let bernoulli = |k: usize| [n - k, k];
        assert!(law_ok(&bernoulli(c[2]), &[0.5, 0.5]));
        assert!(law_ok(&bernoulli(c[3]), &[0.25, 0.75]));
        assert_eq!(g.step, n as u64);
        // Temperature scales the logit: sigmoid(ln 3 / 0.5) = 0.9.
        let mut k = 0;
        for _ in 0..n {
            k += sample_stop(&logits[3..], 0.5, &mut g).unwrap()[0] as usize;
        }
        assert!(law_ok(&bernoulli(k), &[0.1, 0.9]));
        // The same checks catch broken stop samplers: the temperature ignored (T = 0.5
        // draws read against T = 1's law) and the logit's sign flipped.
        assert!(!law_ok(&bernoulli(k), &[0.25, 0.75]));
        let mut flipped = 0;
        for _ in 0..n {
            flipped += sample_stop(&[-logits[3]], 1.0, &mut g).unwrap()[0] as usize;
        }
        assert!(!law_ok(&bernoulli(flipped), &[0.25, 0.75]));
        let before = g.step;
        assert_eq!(
            sample_stop(&[-1.0, 0.0, 2.0], 0.0, &mut g).unwrap(),
            vec![false, false, true]
        );
        assert_eq!(g.step, before);
        assert_eq!(
            sample_stop(&[f32::NAN], 1.0, &mut g).unwrap_err().arg,
            "stop_logits"
        );
        assert_eq!(
            sample_stop(&[0.0], -1.0, &mut g).unwrap_err().arg,
            "temperature"
        );
        assert_eq!(
            sample_stop(&[0.0], f32::NAN, &mut g).unwrap_err().arg,
            "temperature"
        );
    }
}
