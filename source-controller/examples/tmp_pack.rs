fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).unwrap());
    let mut out = std::io::stdout().lock();
    source_controller::artifact::archive::write_tar(&dir, &source_controller::artifact::IgnoreRules::none(), &mut out).unwrap();
}
