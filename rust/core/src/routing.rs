//! Rows of a depth decoder's call routed to the LM heads that score them, and the heads'
//! logits put back in row order.
//!
//! A call of `Q` rows with `K` draft offsets scores `P = Q · (K + 1)` pairs: pair
//! `p = i · (K + 1) + j` is row `i`'s hidden state plus offset `j` (offset 0 is none: the
//! verify head) and is scored by head `min(head_ids[i] + j, num_heads - 1)`. Each head is a
//! constant-weight quantised MatMul in the graph, so the rows of one head must be gathered
//! into one tensor before it and scattered back after it. Written with standard operators that
//! is four nodes per head (Equal, NonZero, Reshape, Gather) plus a scatter: ~90 nodes whose
//! dispatch cost ~0.3 ms of a 2.5 ms code-predictor call on a 2-core CPU, for a call that
//! uses one head. Here it is two passes: [`route_rows`] before the heads, [`merge_rows`]
//! after. The values are the standard graph's bit for bit (the same float additions, copies
//! otherwise), so a verify call's rows stay the AR call's.

use crate::error::{ensure, Result};

/// The head that scores each pair, row-major over (row, offset): `min(head_ids[i] + j,
/// num_heads - 1)` for `j` in `0..=num_offsets`, or `None` for every pair of a row whose id is
/// -1 (a padding row: no head scores it, its logits are zeros). Any other id outside
/// `0..num_heads` is an error (the standard graph would silently score no head).
pub fn pair_heads(
    head_ids: &[i64],
    num_offsets: usize,
    num_heads: usize,
) -> Result<Vec<Option<usize>>> {
    ensure(num_heads > 0, "num_heads", || "must be positive".into())?;
    let mut heads = Vec::with_capacity(head_ids.len() * (num_offsets + 1));
    for (i, &h) in head_ids.iter().enumerate() {
        ensure(
            h == PADDING || (0..num_heads as i64).contains(&h),
            "head_ids",
            || format!("row {i}: head {h} is outside 0..{num_heads} (or -1, a padding row)"),
        )?;
        heads.extend(
            (0..=num_offsets).map(|j| (h != PADDING).then(|| (h as usize + j).min(num_heads - 1))),
        );
    }
    Ok(heads)
}

/// The head id of a padding row (a row added to round a call's size, scored by no head).
pub const PADDING: i64 = -1;

/// Rows each head's input tensor holds: its pairs, rounded up to a multiple of
/// `row_multiple` (`>= 1`) when it has any. Why round: on some CPUs a quantised MatMul computes
/// a row in a call of an odd number of rows by another kernel than in a pair (AVX-512 MLAS,
/// 4 bits in blocks of 64 or 128: rows tiled in twos, a lone last row on the one-row path), so
/// a row is the same bits in every call only if every call has an even number of rows.
pub fn rows_per_head(
    pair_heads: &[Option<usize>],
    num_heads: usize,
    row_multiple: usize,
) -> Vec<usize> {
    let mut counts = vec![0usize; num_heads];
    for &h in pair_heads.iter().flatten() {
        counts[h] += 1;
    }
    let m = row_multiple.max(1);
    counts.iter().map(|&n| n.div_ceil(m) * m).collect()
}

/// Fills each head's input rows (`outs[h]`, `rows_per_head(..)[h] · hidden_size` values,
/// pairs in ascending order, then copies of its last pair up to the rounded count) with
/// `hidden[i] + offsets[j]` (offset 0: `+ 0.0`, as the standard graph adds a zero row), and
/// `order[p]`: pair `p`'s row in the heads' outputs laid end to end (-1 for a padding row's
/// pairs).
pub fn route_rows(
    hidden: &[f32],
    offsets: &[f32],
    pair_heads: &[Option<usize>],
    hidden_size: usize,
    outs: &mut [&mut [f32]],
    order: &mut [i64],
) -> Result<()> {
    let hs = hidden_size;
    ensure(hs > 0, "hidden_size", || "must be positive".into())?;
    ensure(
        hidden.len().is_multiple_of(hs) && offsets.len().is_multiple_of(hs),
        "hidden",
        || {
            format!(
                "hidden ({}) and offsets ({}) must be whole rows of {hs}",
                hidden.len(),
                offsets.len()
            )
        },
    )?;
    let (rows, cols) = (hidden.len() / hs, offsets.len() / hs + 1);
    ensure(
        pair_heads.len() == rows * cols && order.len() == rows * cols,
        "order",
        || {
            format!(
                "expected {} pairs, got {} heads and {} slots",
                rows * cols,
                pair_heads.len(),
                order.len()
            )
        },
    )?;
    ensure(
        pair_heads.iter().flatten().all(|&h| h < outs.len()),
        "pair_heads",
        || format!("every head must be below {}", outs.len()),
    )?;
    let used = rows_per_head(pair_heads, outs.len(), 1);
    let mut start = 0usize;
    let mut first = Vec::with_capacity(outs.len());
    for (h, (out, &n)) in outs.iter().zip(&used).enumerate() {
        let held = out.len() / hs;
        ensure(
            out.len() % hs == 0 && held >= n && (n > 0 || held == 0),
            "outs",
            || {
                format!(
                    "head {h}: {n} pairs do not fit {} values in rows of {hs}",
                    out.len()
                )
            },
        )?;
        first.push(start);
        start += held;
    }
    let mut filled = vec![0usize; outs.len()];
    for (p, &head) in pair_heads.iter().enumerate() {
        let Some(h) = head else {
            order[p] = PADDING;
            continue;
        };
        let (i, j) = (p / cols, p % cols);
        let x = &hidden[i * hs..(i + 1) * hs];
        let dst = &mut outs[h][filled[h] * hs..(filled[h] + 1) * hs];
        if j == 0 {
            dst.iter_mut().zip(x).for_each(|(d, &a)| *d = a + 0.0);
        } else {
            let o = &offsets[(j - 1) * hs..j * hs];
            dst.iter_mut()
                .zip(x.iter().zip(o))
                .for_each(|(d, (&a, &b))| *d = a + b);
        }
        order[p] = (first[h] + filled[h]) as i64;
        filled[h] += 1;
    }
    for (out, &n) in outs.iter_mut().zip(&filled) {
        if n > 0 {
            let (done, rest) = out.split_at_mut(n * hs);
            let last = &done[(n - 1) * hs..];
            rest.chunks_exact_mut(hs)
                .for_each(|r| r.copy_from_slice(last));
        }
    }
    Ok(())
}

/// Row `order[p]` of the heads' outputs laid end to end (`sources[h]`: whole rows of
/// `vocab`; zeros for -1, a padding row's pairs) for every pair `p`: into `logits` for offset 0 (`[Q, vocab]`) and `drafts` for the
/// others (`[Q, K, vocab]`), with `Q · (K + 1)` pairs.
pub fn merge_rows(
    order: &[i64],
    sources: &[&[f32]],
    vocab: usize,
    logits: &mut [f32],
    drafts: &mut [f32],
) -> Result<()> {
    ensure(vocab > 0, "vocab", || "must be positive".into())?;
    let rows: Vec<&[f32]> = sources.iter().flat_map(|s| s.chunks_exact(vocab)).collect();
    ensure(
        sources.iter().all(|s| s.len() % vocab == 0),
        "sources",
        || format!("every head's logits must be whole rows of {vocab}"),
    )?;
    ensure(logits.len().is_multiple_of(vocab), "logits", || {
        format!("must be whole rows of {vocab}")
    })?;
    let q = logits.len() / vocab;
    ensure(q > 0 && order.len().is_multiple_of(q), "order", || {
        format!("{} pairs do not split into {q} rows", order.len())
    })?;
    let cols = order.len() / q;
    ensure(drafts.len() == q * (cols - 1) * vocab, "drafts", || {
        format!(
            "expected {} values, got {}",
            q * (cols - 1) * vocab,
            drafts.len()
        )
    })?;
    for (p, &r) in order.iter().enumerate() {
        ensure(
            r == PADDING || (0..rows.len() as i64).contains(&r),
            "order",
            || {
                format!(
                    "pair {p}: row {r} is outside the heads' {} rows",
                    rows.len()
                )
            },
        )?;
        let (i, j) = (p / cols, p % cols);
        let dst = if j == 0 {
            &mut logits[i * vocab..(i + 1) * vocab]
        } else {
            let d = i * (cols - 1) + j - 1;
            &mut drafts[d * vocab..(d + 1) * vocab]
        };
        if r == PADDING {
            dst.fill(0.0);
        } else {
            dst.copy_from_slice(rows[r as usize]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_take_consecutive_heads_capped_at_the_last() {
        let some = |v: &[usize]| v.iter().map(|&h| Some(h)).collect::<Vec<_>>();
        assert_eq!(
            pair_heads(&[0, 13], 2, 15).unwrap(),
            some(&[0, 1, 2, 13, 14, 14])
        );
        assert_eq!(pair_heads(&[4], 0, 15).unwrap(), some(&[4]));
        assert_eq!(pair_heads(&[-1], 1, 15).unwrap(), vec![None, None]);
        for bad in [-2, 15] {
            let e = pair_heads(&[bad], 1, 15).unwrap_err();
            assert_eq!(e.arg, "head_ids");
        }
    }

    #[test]
    fn route_then_merge_gives_each_pair_its_own_row() {
        let (hs, vocab, heads) = (3, 2, 4);
        let hidden = [1.0, 2.0, 3.0, -1.0, -2.0, -0.0];
        let offsets = [0.5, 0.5, 0.5];
        let ph = pair_heads(&[2, 3], 1, heads).unwrap(); // [2, 3, 3, 3]
        let counts = rows_per_head(&ph, heads, 1);
        assert_eq!(counts, vec![0, 0, 1, 3]);
        let mut bufs: Vec<Vec<f32>> = counts.iter().map(|&n| vec![9.0; n * hs]).collect();
        let mut outs: Vec<&mut [f32]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
        let mut order = vec![0i64; 4];
        route_rows(&hidden, &offsets, &ph, hs, &mut outs, &mut order).unwrap();
        assert_eq!(order, vec![0, 1, 2, 3]);
        assert_eq!(bufs[2], vec![1.0, 2.0, 3.0]);
        assert_eq!(
            bufs[3],
            vec![1.5, 2.5, 3.5, -1.0, -2.0, 0.0, -0.5, -1.5, 0.5]
        );
        assert!(
            bufs[3][5].is_sign_positive(),
            "-0 + 0 is +0, as the graph's zero offset gives"
        );
        // "logits" of a head: the first two values of each of its rows
        let src: Vec<Vec<f32>> = bufs
            .iter()
            .map(|b| b.chunks(hs).flat_map(|r| r[..vocab].to_vec()).collect())
            .collect();
        let srcs: Vec<&[f32]> = src.iter().map(|s| s.as_slice()).collect();
        let (mut logits, mut drafts) = (vec![0.0; 2 * vocab], vec![0.0; 2 * vocab]);
        merge_rows(&order, &srcs, vocab, &mut logits, &mut drafts).unwrap();
        assert_eq!(logits, vec![1.0, 2.0, -1.0, -2.0]);
        assert_eq!(drafts, vec![1.5, 2.5, -0.5, -1.5]);
    }

    #[test]
    fn rounded_heads_repeat_their_last_row_and_padding_rows_score_nothing() {
        let ph = pair_heads(&[1, -1, 0], 0, 2).unwrap();
        let counts = rows_per_head(&ph, 2, 2);
        assert_eq!(counts, vec![2, 2]);
        let mut bufs: Vec<Vec<f32>> = counts.iter().map(|&n| vec![9.0; n]).collect();
        let mut outs: Vec<&mut [f32]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
        let mut order = vec![7i64; 3];
        route_rows(&[1.0, 2.0, 3.0], &[], &ph, 1, &mut outs, &mut order).unwrap();
        assert_eq!(bufs, vec![vec![3.0, 3.0], vec![1.0, 1.0]]);
        assert_eq!(order, vec![2, PADDING, 0]);
        let srcs: Vec<&[f32]> = bufs.iter().map(|b| b.as_slice()).collect();
        let mut logits = vec![5.0f32; 3];
        merge_rows(&order, &srcs, 1, &mut logits, &mut []).unwrap();
        assert_eq!(logits, vec![1.0, 0.0, 3.0]);
    }

    #[test]
    fn bad_sizes_and_orders_are_errors_not_reads_out_of_bounds() {
        let ph = pair_heads(&[0], 0, 2).unwrap();
        let mut short = vec![0.0f32; 1];
        let mut none: Vec<f32> = vec![];
        let mut outs: Vec<&mut [f32]> = vec![short.as_mut_slice(), none.as_mut_slice()];
        let e = route_rows(&[1.0, 2.0], &[], &ph, 2, &mut outs, &mut [0]).unwrap_err();
        assert_eq!(e.arg, "outs");
        let (mut l, mut d) = (vec![0.0f32; 2], vec![]);
        let e = merge_rows(&[1], &[&[1.0, 2.0]], 2, &mut l, &mut d).unwrap_err();
        assert_eq!(e.arg, "order");
        let e = merge_rows(&[0, 0], &[&[1.0, 2.0]], 2, &mut l, &mut d).unwrap_err();
        assert_eq!(e.arg, "drafts");
    }
}
