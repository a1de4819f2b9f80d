//! Draws the operating-limits picture from a series file (see
//! `tollgate_lab::dashboard`): `cargo run -p tollgate-lab --bin dashboard -- SERIES PNG`.
//! `scripts/prometheus-check --picture` runs it on what Prometheus recorded.

use std::path::PathBuf;

use tollgate_lab::dashboard::{Series, draw};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(input), Some(output)) = (args.next(), args.next()) else {
        return Err("usage: dashboard SERIES.tsv PICTURE.png".into());
    };
    let series = Series::parse(&std::fs::read_to_string(&input)?)?;
    draw(&series, &PathBuf::from(&output))?;
    println!("dashboard: {output} from {input}");
    Ok(())
}
