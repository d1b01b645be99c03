# Sourced by each bench after its parameters: builds tcplab and sets BIN (and PROFILE).
# SHORT=1 is how CI runs every bench (bench/short.sh): the debug build the tests made,
# the smallest parameters, a few seconds; it checks that the bench runs and prints its
# table, and asserts no figure.
if [ "${SHORT:-0}" = 1 ]; then
    PROFILE=debug
    cargo build -q "$@"
else
    PROFILE=release
    cargo build --release -q "$@"
fi
BIN=$PWD/target/$PROFILE/tcplab
