def greet(salutation: str, name: str, punctuation: str) -> str:
    return f"{salutation}, {name}{punctuation}"
