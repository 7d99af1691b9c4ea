/* MPI_IN_PLACE is a constant of each MPI library's mpi.h (Open MPI: (void *) 1, MPICH:
 * (void *) -1); the Rust bindings do not carry it, so it is read here. */
#include <mpi.h>

void *strata_mpi_in_place(void) { return MPI_IN_PLACE; }
