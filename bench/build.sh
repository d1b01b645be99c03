# Sourced by each bench after its parameters: builds tcplab and sets BIN (and PROFILE).
# SHORT=1 is how CI runs every bench (bench/short.sh): the debug build the tests made,
# the smallest parameters, a few seconds; it checks that the bench runs and prints its
# table, and asserts no figure.
if [ "${SHORT:-0}" = 1 ]; then
    PROFILE=debug
    # CI builds everything first (`cargo test --no-run`) and runs the benches beside
    # the tests, whose cargo holds the build directory: PREBUILT=1 builds nothing.
    [ "${PREBUILT:-0}" = 1 ] || cargo build -q "$@"
else
    PROFILE=release
    cargo build --release -q "$@"
fi
BIN=$PWD/target/$PROFILE/tcplab
