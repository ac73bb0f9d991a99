# Sourced on the card after tests/gpu/pack.sh ran here: unpacks .gpubin, puts its libraries on the
# search path, and links the build path tf_tests looks for its fixtures under.
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)" || return 1
# A warm card keeps the last call's unpacked binaries: unpack again whenever the .xz is newer.
for f in .gpubin/*.xz; do [ -e "$f" ] && { [ ! -e "${f%.xz}" ] || [ "$f" -nt "${f%.xz}" ]; } && xz -dkf "$f"; done
chmod +x .gpubin/tensorfold* .gpubin/tf_* 2>/dev/null
export LD_LIBRARY_PATH=$PWD/.gpubin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ -f .gpubin/built_in ]; then
  built=$(cat .gpubin/built_in)
  [ -e "$built" ] || { mkdir -p "$(dirname "$built")" && ln -s "$PWD" "$built"; }
fi
