//! Line diff: Myers' O((N+M)·D) greedy algorithm over lines, and unified-diff hunks.

/// One step of an edit script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Line `old[i]` equals `new[j]`.
    Equal(usize, usize),
    /// Line `old[i]` was removed.
    Delete(usize),
    /// Line `new[j]` was added.
    Insert(usize),
}

/// Splits text into lines, each keeping its `\n` (the last may lack one).
pub fn lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// The shortest edit script from `a` to `b`, or `None` when more than `max_d` lines differ.
pub fn diff<T: PartialEq>(a: &[T], b: &[T], max_d: usize) -> Option<Vec<Op>> {
    // Common prefix and suffix need no search.
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..].iter().rev().zip(b[prefix..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (ma, mb) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    let mut ops: Vec<Op> = (0..prefix).map(|i| Op::Equal(i, i)).collect();
    for op in myers(ma, mb, max_d)? {
        ops.push(match op {
            Op::Equal(i, j) => Op::Equal(i + prefix, j + prefix),
            Op::Delete(i) => Op::Delete(i + prefix),
            Op::Insert(j) => Op::Insert(j + prefix),
        });
    }
    ops.extend((0..suffix).map(|k| Op::Equal(a.len() - suffix + k, b.len() - suffix + k)));
    Some(ops)
}

fn myers<T: PartialEq>(a: &[T], b: &[T], max_d: usize) -> Option<Vec<Op>> {
    let (n, m) = (a.len() as isize, b.len() as isize);
    let max = (n + m) as usize;
    let offset = max as isize + 1;
    let mut v = vec![0isize; 2 * max + 3];
    // trace[d] = the part of `v` for diagonals -d..=d after step d.
    let mut trace: Vec<Vec<isize>> = Vec::new();
    let mut found = None;
    'outer: for d in 0..=max.min(max_d) as isize {
        for k in (-d..=d).step_by(2) {
            let down = k == -d || (k != d && v[(offset + k - 1) as usize] < v[(offset + k + 1) as usize]);
            let mut x = if down { v[(offset + k + 1) as usize] } else { v[(offset + k - 1) as usize] + 1 };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            v[(offset + k) as usize] = x;
            if x >= n && y >= m {
                trace.push(v[(offset - d) as usize..=(offset + d) as usize].to_vec());
                found = Some(d);
                break 'outer;
            }
        }
        trace.push(v[(offset - d) as usize..=(offset + d) as usize].to_vec());
    }
    let dmax = found?;

    // Walk back from (n, m): at step d, the snapshot of step d-1 says which neighbour diagonal
    // the path came from; the snake after the edit is equal lines.
    let mut ops = Vec::new();
    let (mut x, mut y) = (n, m);
    for d in (1..=dmax).rev() {
        let prev = &trace[(d - 1) as usize];
        let at = |k: isize| prev[(k + d - 1) as usize];
        let k = x - y;
        let down = k == -d || (k != d && at(k - 1) < at(k + 1));
        let prev_k = if down { k + 1 } else { k - 1 };
        let prev_x = at(prev_k);
        let prev_y = prev_x - prev_k;
        let (mid_x, mid_y) = if down { (prev_x, prev_y + 1) } else { (prev_x + 1, prev_y) };
        while x > mid_x && y > mid_y {
            x -= 1;
            y -= 1;
            ops.push(Op::Equal(x as usize, y as usize));
        }
        ops.push(if down { Op::Insert(prev_y as usize) } else { Op::Delete(prev_x as usize) });
        (x, y) = (prev_x, prev_y);
    }
    while x > 0 && y > 0 {
        x -= 1;
        y -= 1;
        ops.push(Op::Equal(x as usize, y as usize));
    }
    ops.reverse();
    Some(ops)
}

/// A unified-diff hunk: ranges (0-based start, length) and its ops.
#[derive(Debug)]
pub struct Hunk {
    /// Start in the old text (0-based) and line count.
    pub old: (usize, usize),
    /// Start in the new text (0-based) and line count.
    pub new: (usize, usize),
    /// Ops of the hunk, context included.
    pub ops: Vec<Op>,
}

/// Groups an edit script into hunks with `context` unchanged lines around each change.
pub fn hunks(ops: &[Op], context: usize) -> Vec<Hunk> {
    let changes: Vec<usize> =
        ops.iter().enumerate().filter(|(_, op)| !matches!(op, Op::Equal(..))).map(|(i, _)| i).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < changes.len() {
        let start = changes[i].saturating_sub(context);
        let mut end = changes[i];
        // Merge changes whose gap of equal lines is at most 2 * context.
        while i + 1 < changes.len() && changes[i + 1] - end - 1 <= 2 * context {
            i += 1;
            end = changes[i];
        }
        let stop = (end + context + 1).min(ops.len());
        let slice = ops[start..stop].to_vec();
        let old_start = first_old(ops, start);
        let new_start = first_new(ops, start);
        let old_len = slice.iter().filter(|o| !matches!(o, Op::Insert(_))).count();
        let new_len = slice.iter().filter(|o| !matches!(o, Op::Delete(_))).count();
        out.push(Hunk { old: (old_start, old_len), new: (new_start, new_len), ops: slice });
        i += 1;
    }
    out
}

/// Old-text line number at which op `at` starts (lines before it in the old text).
fn first_old(ops: &[Op], at: usize) -> usize {
    ops[..at].iter().filter(|o| !matches!(o, Op::Insert(_))).count()
}

fn first_new(ops: &[Op], at: usize) -> usize {
    ops[..at].iter().filter(|o| !matches!(o, Op::Delete(_))).count()
}

/// GNU-style hunk range: `start,len`, `start` alone when len is 1, and start-1 when len is 0.
pub fn range(start: usize, len: usize) -> String {
    match len {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        _ => format!("{},{len}", start + 1),
    }
}

/// Renders a unified diff of `old` and `new`; `None` when they differ in more than `max_d` lines.
pub fn unified(
    old: &str,
    new: &str,
    old_label: &str,
    new_label: &str,
    context: usize,
    max_d: usize,
) -> Option<Unified> {
    let (a, b) = (lines(old), lines(new));
    let ops = diff(&a, &b, max_d)?;
    let hs = hunks(&ops, context);
    let mut text = String::new();
    if !hs.is_empty() {
        text.push_str(&format!("--- {old_label}\n+++ {new_label}\n"));
    }
    let push = |text: &mut String, sign: char, line: &str| {
        text.push(sign);
        match line.strip_suffix('\n') {
            Some(body) => {
                text.push_str(body);
                text.push('\n');
            }
            None => {
                text.push_str(line);
                text.push_str("\n\\ No newline at end of file\n");
            }
        }
    };
    for h in &hs {
        text.push_str(&format!("@@ -{} +{} @@\n", range(h.old.0, h.old.1), range(h.new.0, h.new.1)));
        for op in &h.ops {
            match *op {
                Op::Equal(i, _) => push(&mut text, ' ', a[i]),
                Op::Delete(i) => push(&mut text, '-', a[i]),
                Op::Insert(j) => push(&mut text, '+', b[j]),
            }
        }
    }
    Some(Unified {
        text,
        added: ops.iter().filter(|o| matches!(o, Op::Insert(_))).count(),
        removed: ops.iter().filter(|o| matches!(o, Op::Delete(_))).count(),
        hunks: hs.len(),
    })
}

/// A rendered diff and its counts.
#[derive(Debug)]
pub struct Unified {
    /// The unified diff text (empty when identical).
    pub text: String,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
    /// Number of hunks.
    pub hunks: usize,
}
