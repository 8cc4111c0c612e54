"""AssistLab: does this assistant model make this target model faster, by how much, and why?"""

__version__ = "0.1.0"
