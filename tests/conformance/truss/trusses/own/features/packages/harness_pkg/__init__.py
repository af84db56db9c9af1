PACKAGE_VALUE = "from-packages"
