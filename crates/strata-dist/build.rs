//! With the `mpi` feature, compiles the one C function the bindings lack: the address of
//! `MPI_IN_PLACE`, which each MPI library defines as its own constant in `mpi.h`.

fn main() {
    println!("cargo:rerun-if-changed=src/mpi/shim.c");
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_MPI").is_none() {
        return;
    }
    probe_and_compile();
}

#[cfg(feature = "mpi")]
fn probe_and_compile() {
    let library = match build_probe_mpi::probe() {
        Ok(library) => library,
        Err(errors) => {
            for e in errors {
                println!("cargo:warning=looking for MPI: {e}");
            }
            panic!(
                "the `mpi` feature needs an MPI installation: on Debian, apt-get install \
                 libopenmpi-dev openmpi-bin libclang-dev pkg-config"
            );
        }
    };
    let mut build = cc::Build::new();
    build.file("src/mpi/shim.c");
    for path in &library.include_paths {
        build.include(path);
    }
    build.compile("strata_mpi_shim");
}

#[cfg(not(feature = "mpi"))]
fn probe_and_compile() {}
