//! `rdctl`: the RedDwarf image toolchain command line. It parses arguments and calls libraries.

fn main() {
    println!("rdctl");
}
