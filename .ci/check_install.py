"""What .ci/run checks after `codecspec synth` ran from the installed wheel: the package and
espeak-ng's library were loaded from the virtual environment (not the source tree, not a system
package), and the WAV holds speech-length audio. Usage: python .ci/check_install.py WORKDIR"""

import sys
import wave
from pathlib import Path

import codecspec
from codecspec.frontend import espeak


def main(work: Path) -> int:
    venv = work / "venv"
    if not Path(codecspec.__file__).resolve().is_relative_to(venv.resolve()):
        sys.exit(f"codecspec was imported from {codecspec.__file__}, not the fresh venv")
    lib = espeak.library_info()
    if not Path(lib["path"]).resolve().is_relative_to(venv.resolve()):
        sys.exit(f"espeak-ng's library came from {lib['path']}, not the espeakng-loader wheel")
    with wave.open(str(work / "speech.wav")) as w:
        seconds = w.getnframes() / w.getframerate()
    if seconds < 0.5:
        sys.exit(f"speech.wav holds {seconds:.2f} s of audio")
    print(f"synth from the wheel: {seconds:.2f} s of audio; espeak-ng {lib['version']} (wheel)")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
