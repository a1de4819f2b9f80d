//! Every target's properties under plain `cargo test` (stable, no libFuzzer): over the
//! seed corpus, and over pseudo-random mutations of it.

#[path = "../../tests/support/rng.rs"]
mod rng;

use std::path::Path;

use rng::Rng;

type Check = fn(&[u8]);

const TARGETS: [(&str, Check); 4] = [
    ("quota", tollgate_fuzz::quota::check),
    ("client_ip", tollgate_fuzz::client_ip::check),
    ("cost_routes", tollgate_fuzz::cost_routes::check),
    ("headers", tollgate_fuzz::headers::check),
];

/// Mutations per seed file.
const MUTATIONS: usize = 300;

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("seeds")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("entry").path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| std::fs::read(path).expect("seed"))
        .collect()
}

/// Draws below `n`, as an index.
fn below(rng: &mut Rng, n: usize) -> usize {
    rng.below(n as u64) as usize
}

/// A few byte-level edits, the kind libFuzzer makes: flip, insert, delete, duplicate
/// a slice, splice in an interesting byte.
fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    const INTERESTING: &[u8] = b"\0\t\n \"',-./0123456789:;=[\\]_{}*\x7f\x80\xff";
    let mut data = seed.to_vec();
    for _ in 0..=below(rng, 4) {
        let at = below(rng, data.len() + 1);
        match below(rng, 5) {
            0 if at < data.len() => data[at] ^= 1 << below(rng, 8),
            1 => data.insert(at, INTERESTING[below(rng, INTERESTING.len())]),
            2 if at < data.len() => {
                data.remove(at);
            }
            3 if at < data.len() => {
                let end = (at + below(rng, 16)).min(data.len());
                let copy = data[at..end].to_vec();
                let to = below(rng, data.len() + 1);
                data.splice(to..to, copy);
            }
            _ => data.insert(at, rng.next() as u8),
        }
    }
    data
}

#[test]
fn every_target_holds_on_its_seeds_and_their_mutations() {
    for (target, check) in TARGETS {
        let seeds = seeds(target);
        assert!(!seeds.is_empty(), "no seeds for {target}");
        let mut rng = Rng(0x746f_6c6c_6761_7465);
        for seed in &seeds {
            check(seed);
            for _ in 0..MUTATIONS {
                check(&mutate(&mut rng, seed));
            }
        }
    }
}
