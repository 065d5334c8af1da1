"""`pip install --no-build-isolation .`: builds the Python module lingbot_map with CMake
(scikit-build) from the build tools already installed, downloading nothing."""

import re
from pathlib import Path

from skbuild import setup

version = re.search(r"project\(lingbot-map VERSION ([0-9.]+)",
                    Path(__file__).with_name("CMakeLists.txt").read_text()).group(1)

setup(
    name="lingbot_map",
    version=version,
    description="LingBot-Map engine: streaming 3D reconstruction, numpy in and out",
    packages=["lingbot_map"],
    package_dir={"": "python"},
    python_requires=">=3.8",
    install_requires=["numpy"],
    cmake_args=["-DLINGBOT_PYTHON=ON", "-DLINGBOT_TESTS=OFF", "-DLINGBOT_BENCH=OFF"],
    cmake_install_dir="python",  # the package lives in python/lingbot_map
    cmake_install_target="install-python",
)
